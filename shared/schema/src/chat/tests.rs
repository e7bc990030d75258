//! Tests of chat threads and messages (reference U9, V5).

#![allow(clippy::unwrap_used, reason = "tests")]

use serde_json::json;

use super::*;
use crate::test_support::new_db;

fn message(thread: &str, content: &str, pinned: bool) -> NewChatMessage {
    NewChatMessage {
        thread_id: thread.to_owned(),
        app_id: None,
        title: None,
        role: ChatRole::User,
        content: content.to_owned(),
        pinned,
        meta: None,
    }
}

#[test]
fn messages_keep_order_and_threads_upsert() {
    let mut db = new_db();
    let first = NewChatMessage {
        app_id: Some("a".to_owned()),
        title: Some("Build".to_owned()),
        ..message("t", "one", false)
    };
    db.append_chat_message(&first).unwrap();
    let second = NewChatMessage {
        role: ChatRole::Assistant,
        meta: Some(json!({"artifact": {"version": 1}})),
        ..message("t", "two", false)
    };
    db.append_chat_message(&second).unwrap();
    let thread = db.chat_thread("t").unwrap();
    assert_eq!(
        (thread.app_id.as_deref(), thread.title.as_deref()),
        (Some("a"), Some("Build")),
        "kept by COALESCE"
    );
    assert!(thread.updated_at > thread.created_at);
    let messages = db.chat_messages("t").unwrap();
    let summary: Vec<(&str, ChatRole, Option<&str>)> = messages
        .iter()
        .map(|m| (m.content.as_str(), m.role, m.meta.as_deref()))
        .collect();
    assert_eq!(
        summary,
        [
            ("one", ChatRole::User, None),
            (
                "two",
                ChatRole::Assistant,
                Some(r#"{"artifact":{"version":1}}"#)
            )
        ]
    );
    assert_eq!(db.chat_threads(Some("a")).unwrap().len(), 1);
    assert!(db.chat_threads(Some("b")).unwrap().is_empty());
}

#[test]
fn pinned_messages_survive_any_prune() {
    let mut db = new_db();
    db.append_chat_message(&message("t", "bootstrap 1", true))
        .unwrap();
    db.append_chat_message(&message("t", "bootstrap 2", true))
        .unwrap();
    for n in 0..20 {
        db.append_chat_message(&message("t", &format!("chatter {n}"), false))
            .unwrap();
    }
    assert_eq!(db.prune_chat_messages("t", 5).unwrap(), 15);
    let contents: Vec<String> = db
        .chat_messages("t")
        .unwrap()
        .into_iter()
        .map(|m| m.content)
        .collect();
    assert_eq!(contents.len(), 7);
    assert_eq!(&contents[..3], ["bootstrap 1", "bootstrap 2", "chatter 15"]);
    assert_eq!(db.prune_chat_messages("t", 0).unwrap(), 5);
    assert_eq!(db.chat_messages("t").unwrap().len(), 2);
    assert_eq!(
        db.delete_chat_thread("t").unwrap(),
        2,
        "deleting a thread takes pinned messages too"
    );
}

#[test]
fn pins_and_meta_are_the_only_mutations() {
    let mut db = new_db();
    let id = db.append_chat_message(&message("t", "x", false)).unwrap();
    db.pin_chat_message(id, true).unwrap();
    db.update_chat_message_meta(id, Some(&json!({"k": [1, 2]})))
        .unwrap();
    let stored = &db.chat_messages("t").unwrap()[0];
    assert!(stored.pinned);
    assert_eq!(stored.meta.as_deref(), Some(r#"{"k":[1,2]}"#));
    db.update_chat_message_meta(id, None).unwrap();
    assert_eq!(db.chat_messages("t").unwrap()[0].meta, None);
    let reasons = [
        db.pin_chat_message(999, true).unwrap_err().reason(),
        db.update_chat_message_meta(999, None).unwrap_err().reason(),
        db.chat_messages("nope").unwrap_err().reason(),
        db.prune_chat_messages("nope", 1).unwrap_err().reason(),
        db.delete_chat_thread("nope").unwrap_err().reason(),
    ];
    assert_eq!(
        reasons,
        [
            "MESSAGE_NOT_FOUND",
            "MESSAGE_NOT_FOUND",
            "THREAD_NOT_FOUND",
            "THREAD_NOT_FOUND",
            "THREAD_NOT_FOUND"
        ]
    );
}

#[test]
fn an_unknown_stored_role_is_a_typed_error() {
    let mut db = new_db();
    let id = db.append_chat_message(&message("t", "x", false)).unwrap();
    db.connection()
        .execute(
            "UPDATE snug_chat_messages SET role = 'tool' WHERE id = ?1",
            [id],
        )
        .unwrap();
    assert!(
        matches!(db.chat_messages("t"), Err(ChatError::UnknownRole { role, .. }) if role == "tool")
    );
}
