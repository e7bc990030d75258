//! `snug docs seed|set|get|list|delete`: the per-app wiki (seeding fills absent slugs only).

use super::*;

#[derive(Debug, Subcommand)]
pub(crate) enum DocsCommand {
    /// Seeds an app's wiki from Markdown files: slug = file name without `.md`, title = its first
    /// `# ` heading; prompt files join into the `build-prompt` doc. Only slugs the app does not
    /// have are written: an existing doc is never overwritten.
    Seed {
        /// The user database.
        file: PathBuf,
        /// The app (`snug_apps.app_id`).
        #[arg(long)]
        app: String,
        /// Authoring files (`vision.md`, `lessons.md`, …).
        #[arg(value_name = "MARKDOWN_FILE")]
        docs: Vec<PathBuf>,
        /// Prompt files, joined in name order into `build-prompt`.
        #[arg(long = "prompt", value_name = "FILE")]
        prompts: Vec<PathBuf>,
    },
    /// Creates or replaces a doc (an existing title is kept without --title).
    Set {
        /// The user database.
        file: PathBuf,
        /// The app (`snug_apps.app_id`).
        #[arg(long)]
        app: String,
        /// The doc's slug (`lessons`, `vision`, `build-prompt`, …).
        #[arg(long)]
        slug: String,
        /// Title.
        #[arg(long)]
        title: Option<String>,
        /// A file holding the Markdown.
        #[arg(long, value_name = "MARKDOWN_FILE")]
        content_file: PathBuf,
    },
    /// Prints one doc's Markdown.
    Get {
        /// The user database, plain or protected.
        file: PathBuf,
        /// The app (`snug_apps.app_id`).
        #[arg(long)]
        app: String,
        /// The doc's slug.
        #[arg(long)]
        slug: String,
        #[command(flatten)]
        secrets: SecretArgs,
    },
    /// Lists an app's docs.
    List {
        /// The user database, plain or protected.
        file: PathBuf,
        /// The app (`snug_apps.app_id`).
        #[arg(long)]
        app: String,
        #[command(flatten)]
        secrets: SecretArgs,
    },
    /// Deletes one doc.
    Delete {
        /// The user database.
        file: PathBuf,
        /// The app (`snug_apps.app_id`).
        #[arg(long)]
        app: String,
        /// The doc's slug.
        #[arg(long)]
        slug: String,
    },
}

fn borrowed(files: &[(String, String)]) -> Vec<(&str, &str)> {
    files
        .iter()
        .map(|(name, text)| (name.as_str(), text.as_str()))
        .collect()
}

/// A file's name as a seed takes it.
fn file_name(path: &Path) -> Result<String, Failure> {
    path.file_name()
        .and_then(|n| n.to_str())
        .map(str::to_owned)
        .ok_or_else(|| invalid(format!("{} has no UTF-8 file name", path.display())))
}

pub(crate) fn run_docs(command: DocsCommand, limits: &Limits) -> Result<Outcome, Failure> {
    match command {
        DocsCommand::Seed {
            file,
            app,
            docs,
            prompts,
        } => {
            if docs.is_empty() && prompts.is_empty() {
                return Err(Failure::usage(
                    "give Markdown files to seed (or --prompt files)",
                ));
            }
            let read_all = |paths: &[PathBuf]| -> Result<Vec<(String, String)>, Failure> {
                paths
                    .iter()
                    .map(|path| Ok((file_name(path)?, read_text(path)?)))
                    .collect()
            };
            let docs = read_all(&docs)?;
            let prompts = read_all(&prompts)?;
            let seeds = snug_schema::starter_doc_seeds(&borrowed(&docs), &borrowed(&prompts));
            let slugs: Vec<&str> = seeds.iter().map(|s| s.slug.as_str()).collect();
            let (inserted, length) = write(&file, |db| {
                require_app(db, &app)?;
                let inserted = db.seed_docs_absent_only(&app, &seeds)?;
                Ok(Change {
                    result: inserted,
                    changed: inserted > 0,
                })
            })?;
            Ok(written(
                &file,
                length,
                format!(
                    "Seeded {inserted} of {} doc(s) for app {app} (existing slugs are kept)",
                    seeds.len()
                ),
                json!({ "app_id": app, "seeded": inserted, "slugs": slugs }),
            ))
        }
        DocsCommand::Set {
            file,
            app,
            slug,
            title,
            content_file,
        } => {
            let content = read_text(&content_file)?;
            let ((), length) = write(&file, |db| {
                require_app(db, &app)?;
                db.upsert_doc(&app, &slug, title.as_deref(), &content)?;
                Ok(changed(()))
            })?;
            Ok(written(
                &file,
                length,
                format!("Wrote doc {slug} of app {app}"),
                json!({ "app_id": app, "slug": slug }),
            ))
        }
        DocsCommand::Get {
            file,
            app,
            slug,
            secrets,
        } => {
            let db = read(&file, &secrets, limits)?;
            let doc = db.doc(&app, &slug)?;
            Ok(read_outcome(doc.content.clone(), json!({ "doc": doc })))
        }
        DocsCommand::List { file, app, secrets } => {
            let db = read(&file, &secrets, limits)?;
            require_app(&db, &app)?;
            let docs = db.docs(&app)?;
            let mut text = format!("app {app}: {} doc(s)", docs.len());
            for doc in &docs {
                text.push_str(&format!(
                    "\n  {:<16} {} ({} bytes, {})",
                    doc.slug,
                    doc.title.as_deref().unwrap_or(""),
                    doc.content.len(),
                    doc.updated_at
                ));
            }
            Ok(read_outcome(text, json!({ "app_id": app, "docs": docs })))
        }
        DocsCommand::Delete { file, app, slug } => {
            let ((), length) = write(&file, |db| Ok(changed(db.delete_doc(&app, &slug)?)))?;
            Ok(written(
                &file,
                length,
                format!("Deleted doc {slug} of app {app}"),
                json!({ "app_id": app, "slug": slug }),
            ))
        }
    }
}
