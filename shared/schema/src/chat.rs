//! Chat history (spec §8.1): threads, messages, pruning that spares pinned messages.
//!
//! Appending a message upserts its thread first, keeping an existing app id and title unless
//! new ones are given. Only a message's `pinned` flag and `meta` sidecar are mutable.

use rusqlite::{OptionalExtension, Row, params};
use serde::Serialize;

use crate::db::{UserDb, check_cap};
use crate::error::ChatError;

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ChatRole {
    /// The user.
    User,
    /// The model.
    Assistant,
    /// The host.
    System,
}

impl ChatRole {
    /// Returns the stored text.
    pub fn as_str(self) -> &'static str {
        match self {
            ChatRole::User => "user",
            ChatRole::Assistant => "assistant",
            ChatRole::System => "system",
        }
    }

    /// Parses the stored text.
    pub fn parse(text: &str) -> Option<ChatRole> {
        match text {
            "user" => Some(ChatRole::User),
            "assistant" => Some(ChatRole::Assistant),
            "system" => Some(ChatRole::System),
            _ => None,
        }
    }
}

/// A message to append.
#[derive(Debug, Clone, PartialEq)]
pub struct NewChatMessage {
    /// The thread (`app:<appId>`, `thr-<uuid>`, `builder:*`); created when new.
    pub thread_id: String,
    /// The thread's app; an existing thread keeps its app when `None`.
    pub app_id: Option<String>,
    /// The thread's title; an existing thread keeps its title when `None`.
    pub title: Option<String>,
    /// Author.
    pub role: ChatRole,
    /// Text.
    pub content: String,
    /// Pinned messages (bootstrap turns) survive pruning.
    pub pinned: bool,
    /// JSON sidecar.
    pub meta: Option<serde_json::Value>,
}

/// A stored message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ChatMessage {
    /// Row id (ordering key).
    pub id: i64,
    /// Thread.
    pub thread_id: String,
    /// Author.
    pub role: ChatRole,
    /// Text.
    pub content: String,
    /// Creation time.
    pub created_at: String,
    /// Whether pruning spares it.
    pub pinned: bool,
    /// JSON sidecar as stored.
    pub meta: Option<String>,
}

/// A stored thread.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ChatThread {
    /// Thread id.
    pub thread_id: String,
    /// App, if any.
    pub app_id: Option<String>,
    /// Title.
    pub title: Option<String>,
    /// Creation time.
    pub created_at: String,
    /// Last message time.
    pub updated_at: String,
}

fn message_from_row(row: &Row<'_>) -> rusqlite::Result<(ChatMessage, String)> {
    let role_text: String = row.get(2)?;
    Ok((
        ChatMessage {
            id: row.get(0)?,
            thread_id: row.get(1)?,
            role: ChatRole::parse(&role_text).unwrap_or(ChatRole::System),
            content: row.get(3)?,
            created_at: row.get(4)?,
            pinned: row.get::<_, i64>(5)? == 1,
            meta: row.get(6)?,
        },
        role_text,
    ))
}

impl UserDb {
    /// Appends a message (upserting its thread) and returns its id.
    pub fn append_chat_message(&mut self, message: &NewChatMessage) -> Result<i64, ChatError> {
        let now = self.now();
        let meta = message.meta.as_ref().map(crate::kv::encode_json);
        let tx = self.write_tx()?;
        tx.execute(
            "INSERT INTO snug_chat_threads (thread_id, app_id, title, created_at, updated_at) \
             VALUES (?1, ?2, ?3, ?4, ?4) \
             ON CONFLICT (thread_id) DO UPDATE SET app_id = COALESCE(excluded.app_id, app_id), \
             title = COALESCE(excluded.title, title), updated_at = excluded.updated_at",
            params![message.thread_id, message.app_id, message.title, now],
        )?;
        tx.execute(
            "INSERT INTO snug_chat_messages (thread_id, role, content, created_at, pinned, meta) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![
                message.thread_id,
                message.role.as_str(),
                message.content,
                now,
                i64::from(message.pinned),
                meta
            ],
        )?;
        let id = tx.last_insert_rowid();
        check_cap(&tx)?;
        tx.commit()?;
        Ok(id)
    }

    /// Returns a thread's messages in order.
    pub fn chat_messages(&self, thread_id: &str) -> Result<Vec<ChatMessage>, ChatError> {
        self.chat_thread(thread_id)?;
        let mut stmt = self.connection().prepare(
            "SELECT id, thread_id, role, content, created_at, pinned, meta FROM snug_chat_messages \
             WHERE thread_id = ?1 ORDER BY id",
        )?;
        let rows = stmt
            .query_map([thread_id], message_from_row)?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        rows.into_iter()
            .map(|(message, role_text)| match ChatRole::parse(&role_text) {
                Some(_) => Ok(message),
                None => Err(ChatError::UnknownRole {
                    id: message.id,
                    role: role_text,
                }),
            })
            .collect()
    }

    /// Returns one thread.
    pub fn chat_thread(&self, thread_id: &str) -> Result<ChatThread, ChatError> {
        self.connection()
            .query_row(
                "SELECT thread_id, app_id, title, created_at, updated_at FROM snug_chat_threads WHERE thread_id = ?1",
                [thread_id],
                |row| {
                    Ok(ChatThread {
                        thread_id: row.get(0)?,
                        app_id: row.get(1)?,
                        title: row.get(2)?,
                        created_at: row.get(3)?,
                        updated_at: row.get(4)?,
                    })
                },
            )
            .optional()?
            .ok_or_else(|| ChatError::ThreadNotFound { thread_id: thread_id.to_owned() })
    }

    /// Lists threads (of one app when `app_id` is given), most recently updated first.
    pub fn chat_threads(&self, app_id: Option<&str>) -> Result<Vec<ChatThread>, ChatError> {
        let mut stmt = self.connection().prepare(
            "SELECT thread_id, app_id, title, created_at, updated_at FROM snug_chat_threads \
             WHERE ?1 IS NULL OR app_id = ?1 ORDER BY updated_at DESC, thread_id",
        )?;
        let threads = stmt
            .query_map([app_id], |row| {
                Ok(ChatThread {
                    thread_id: row.get(0)?,
                    app_id: row.get(1)?,
                    title: row.get(2)?,
                    created_at: row.get(3)?,
                    updated_at: row.get(4)?,
                })
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(threads)
    }

    /// Deletes unpinned messages beyond the newest `keep_unpinned` unpinned ones; pinned
    /// messages always survive. Returns how many were deleted.
    pub fn prune_chat_messages(
        &mut self,
        thread_id: &str,
        keep_unpinned: usize,
    ) -> Result<usize, ChatError> {
        self.chat_thread(thread_id)?;
        let tx = self.write_tx()?;
        let n = tx.execute(
            "DELETE FROM snug_chat_messages WHERE thread_id = ?1 AND pinned = 0 AND id NOT IN \
             (SELECT id FROM snug_chat_messages WHERE thread_id = ?1 AND pinned = 0 ORDER BY id DESC LIMIT ?2)",
            params![thread_id, i64::try_from(keep_unpinned).unwrap_or(i64::MAX)],
        )?;
        tx.commit()?;
        Ok(n)
    }

    /// Pins or unpins a message.
    pub fn pin_chat_message(&mut self, id: i64, pinned: bool) -> Result<(), ChatError> {
        let tx = self.write_tx()?;
        let n = tx.execute(
            "UPDATE snug_chat_messages SET pinned = ?2 WHERE id = ?1",
            params![id, i64::from(pinned)],
        )?;
        if n == 0 {
            return Err(ChatError::MessageNotFound { id });
        }
        tx.commit()?;
        Ok(())
    }

    /// Replaces a message's JSON sidecar (`None` clears it).
    pub fn update_chat_message_meta(
        &mut self,
        id: i64,
        meta: Option<&serde_json::Value>,
    ) -> Result<(), ChatError> {
        let meta = meta.map(crate::kv::encode_json);
        let tx = self.write_tx()?;
        let n = tx.execute(
            "UPDATE snug_chat_messages SET meta = ?2 WHERE id = ?1",
            params![id, meta],
        )?;
        if n == 0 {
            return Err(ChatError::MessageNotFound { id });
        }
        check_cap(&tx)?;
        tx.commit()?;
        Ok(())
    }

    /// Deletes a thread and all its messages, pinned ones included. Returns the message count.
    pub fn delete_chat_thread(&mut self, thread_id: &str) -> Result<usize, ChatError> {
        self.chat_thread(thread_id)?;
        let tx = self.write_tx()?;
        let n = tx.execute(
            "DELETE FROM snug_chat_messages WHERE thread_id = ?1",
            [thread_id],
        )?;
        tx.execute(
            "DELETE FROM snug_chat_threads WHERE thread_id = ?1",
            [thread_id],
        )?;
        tx.commit()?;
        Ok(n)
    }
}

#[cfg(test)]
mod tests;
