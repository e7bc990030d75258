//! Tests of the per-app wiki: upsert, absent-only seeding, per-app isolation (reference V7).

#![allow(clippy::unwrap_used, reason = "tests")]

use super::*;
use crate::test_support::new_db;

#[test]
fn upsert_keeps_a_title_and_seeding_never_overwrites() {
    let mut db = new_db();
    db.upsert_doc("a", "vision", Some("Vision"), "# v1")
        .unwrap();
    db.upsert_doc("a", "vision", None, "# v2").unwrap();
    let doc = db.doc("a", "vision").unwrap();
    assert_eq!(
        (doc.title.as_deref(), doc.content.as_str()),
        (Some("Vision"), "# v2")
    );

    let seeds = starter_doc_seeds(
        &[
            ("vision.md", "# Starter vision\nbody"),
            ("plan.md", "no heading"),
        ],
        &[("2-second.md", "second"), ("1-first.md", "first")],
    );
    assert_eq!(
        db.seed_docs_absent_only("a", &seeds).unwrap(),
        2,
        "vision exists, plan and build-prompt are new"
    );
    assert_eq!(
        db.doc("a", "vision").unwrap().content,
        "# v2",
        "the living memory wins"
    );
    let prompt = db.doc("a", BUILD_PROMPT_SLUG).unwrap();
    assert_eq!(
        (prompt.title.as_deref(), prompt.content.as_str()),
        (Some("Build prompt"), "first\n\n---\n\nsecond")
    );
    assert_eq!(db.doc("a", "plan").unwrap().title, None);
    assert_eq!(seeds[0].title.as_deref(), Some("Starter vision"));
    assert_eq!(db.seed_docs_absent_only("a", &seeds).unwrap(), 0);

    assert!(db.docs("b").unwrap().is_empty(), "docs are per app");
    assert_eq!(db.doc("b", "vision").unwrap_err().reason(), "DOC_NOT_FOUND");
    db.delete_doc("a", "plan").unwrap();
    assert_eq!(
        db.delete_doc("a", "plan").unwrap_err().reason(),
        "DOC_NOT_FOUND"
    );
    let slugs: Vec<String> = db.docs("a").unwrap().into_iter().map(|d| d.slug).collect();
    assert_eq!(slugs, ["build-prompt", "vision"]);
}
