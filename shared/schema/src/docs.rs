//! Per-app knowledge wiki (spec §8.1): `(app_id, slug) → markdown`.
//!
//! Seeding is absent-slugs-only: the wiki is the app's living memory, so a starter or shared
//! bundle never overwrites a row that already exists.

use rusqlite::{OptionalExtension, params};
use serde::Serialize;

use crate::db::{UserDb, check_cap};
use crate::error::DocError;

/// The advisory doc slugs; the table accepts any slug.
pub const ADVISORY_DOC_SLUGS: [&str; 6] = [
    "vision",
    "requirements",
    "plan",
    "lessons",
    "memory",
    "next-tasks",
];

/// The slug of the seeded build prompt.
pub const BUILD_PROMPT_SLUG: &str = "build-prompt";

/// A stored doc.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Doc {
    /// The app.
    pub app_id: String,
    /// The slug.
    pub slug: String,
    /// Optional title.
    pub title: Option<String>,
    /// Markdown.
    pub content: String,
    /// Last change.
    pub updated_at: String,
}

/// A doc to seed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DocSeed {
    /// The slug.
    pub slug: String,
    /// Optional title.
    pub title: Option<String>,
    /// Markdown.
    pub content: String,
}

/// Builds the seeds a starter install writes: one per authoring file (slug = file name without
/// `.md`, title = its first `# ` heading) and a `build-prompt` doc joining the prompt files,
/// sorted by name, with `\n\n---\n\n`.
pub fn starter_doc_seeds(
    authoring_files: &[(&str, &str)],
    prompt_files: &[(&str, &str)],
) -> Vec<DocSeed> {
    let mut seeds: Vec<DocSeed> = authoring_files
        .iter()
        .map(|(name, content)| DocSeed {
            slug: name.strip_suffix(".md").unwrap_or(name).to_owned(),
            title: content
                .lines()
                .find_map(|line| line.strip_prefix("# "))
                .map(|title| title.trim().to_owned()),
            content: (*content).to_owned(),
        })
        .collect();
    if !prompt_files.is_empty() {
        let mut prompts = prompt_files.to_vec();
        prompts.sort_by(|a, b| a.0.cmp(b.0));
        let content = prompts
            .iter()
            .map(|(_, text)| *text)
            .collect::<Vec<_>>()
            .join("\n\n---\n\n");
        seeds.push(DocSeed {
            slug: BUILD_PROMPT_SLUG.to_owned(),
            title: Some("Build prompt".to_owned()),
            content,
        });
    }
    seeds
}

impl UserDb {
    /// Creates or replaces a doc's content; an existing title is kept when `title` is `None`.
    pub fn upsert_doc(
        &mut self,
        app_id: &str,
        slug: &str,
        title: Option<&str>,
        content: &str,
    ) -> Result<(), DocError> {
        let now = self.now();
        let tx = self.write_tx()?;
        tx.execute(
            "INSERT INTO snug_app_docs (app_id, slug, title, content, updated_at) VALUES (?1, ?2, ?3, ?4, ?5) \
             ON CONFLICT (app_id, slug) DO UPDATE SET title = COALESCE(excluded.title, title), \
             content = excluded.content, updated_at = excluded.updated_at",
            params![app_id, slug, title, content, now],
        )?;
        check_cap(&tx)?;
        tx.commit()?;
        Ok(())
    }

    /// Inserts the seeds whose slug the app does not have yet; returns how many were inserted.
    pub fn seed_docs_absent_only(
        &mut self,
        app_id: &str,
        seeds: &[DocSeed],
    ) -> Result<usize, DocError> {
        let now = self.now();
        let tx = self.write_tx()?;
        let mut inserted = 0;
        {
            let mut stmt = tx.prepare(
                "INSERT INTO snug_app_docs (app_id, slug, title, content, updated_at) VALUES (?1, ?2, ?3, ?4, ?5) \
                 ON CONFLICT (app_id, slug) DO NOTHING",
            )?;
            for seed in seeds {
                inserted +=
                    stmt.execute(params![app_id, seed.slug, seed.title, seed.content, now])?;
            }
        }
        check_cap(&tx)?;
        tx.commit()?;
        Ok(inserted)
    }

    /// Returns one doc.
    pub fn doc(&self, app_id: &str, slug: &str) -> Result<Doc, DocError> {
        self.connection()
            .query_row(
                "SELECT app_id, slug, title, content, updated_at FROM snug_app_docs WHERE app_id = ?1 AND slug = ?2",
                params![app_id, slug],
                |row| {
                    Ok(Doc {
                        app_id: row.get(0)?,
                        slug: row.get(1)?,
                        title: row.get(2)?,
                        content: row.get(3)?,
                        updated_at: row.get(4)?,
                    })
                },
            )
            .optional()?
            .ok_or_else(|| DocError::DocNotFound { app_id: app_id.to_owned(), slug: slug.to_owned() })
    }

    /// Returns an app's docs by slug.
    pub fn docs(&self, app_id: &str) -> Result<Vec<Doc>, DocError> {
        let mut stmt = self.connection().prepare(
            "SELECT app_id, slug, title, content, updated_at FROM snug_app_docs WHERE app_id = ?1 ORDER BY slug",
        )?;
        let docs = stmt
            .query_map([app_id], |row| {
                Ok(Doc {
                    app_id: row.get(0)?,
                    slug: row.get(1)?,
                    title: row.get(2)?,
                    content: row.get(3)?,
                    updated_at: row.get(4)?,
                })
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(docs)
    }

    /// Deletes one doc.
    pub fn delete_doc(&mut self, app_id: &str, slug: &str) -> Result<(), DocError> {
        let tx = self.write_tx()?;
        let n = tx.execute(
            "DELETE FROM snug_app_docs WHERE app_id = ?1 AND slug = ?2",
            params![app_id, slug],
        )?;
        if n == 0 {
            return Err(DocError::DocNotFound {
                app_id: app_id.to_owned(),
                slug: slug.to_owned(),
            });
        }
        tx.commit()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests;
