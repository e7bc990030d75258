//! `snug chat append|prune|pin|delete|threads|messages`: chat history.

use super::*;

#[derive(Debug, Subcommand)]
pub(crate) enum ChatCommand {
    /// Appends a message, creating its thread when new.
    Append {
        /// The user database.
        file: PathBuf,
        /// The thread (`app:<appId>`, `thr-<uuid>`, `builder:*`).
        #[arg(long)]
        thread: String,
        /// Who wrote it: user, assistant or system.
        #[arg(long)]
        role: String,
        /// The message text.
        #[arg(long, conflicts_with = "content_file")]
        content: Option<String>,
        /// A file holding the message text.
        #[arg(long, value_name = "FILE")]
        content_file: Option<PathBuf>,
        /// The thread's app (a new thread's; an existing thread keeps its own when absent).
        #[arg(long)]
        app: Option<String>,
        /// The thread's title (an existing thread keeps its own when absent).
        #[arg(long)]
        title: Option<String>,
        /// Pin it: pruning spares pinned messages (bootstrap turns).
        #[arg(long)]
        pinned: bool,
        /// The JSON sidecar, as JSON text.
        #[arg(long, value_name = "JSON")]
        meta: Option<String>,
    },
    /// Deletes a thread's unpinned messages beyond the newest KEEP unpinned ones.
    Prune {
        /// The user database.
        file: PathBuf,
        /// The thread.
        #[arg(long)]
        thread: String,
        /// How many of the newest unpinned messages to keep.
        #[arg(long)]
        keep: usize,
    },
    /// Pins a message (or unpins it with --unpin).
    Pin {
        /// The user database.
        file: PathBuf,
        /// The message id (`snug_chat_messages.id`).
        #[arg(long)]
        message: i64,
        /// Unpin instead.
        #[arg(long)]
        unpin: bool,
    },
    /// Deletes a thread and all its messages, pinned ones included.
    Delete {
        /// The user database.
        file: PathBuf,
        /// The thread.
        #[arg(long)]
        thread: String,
    },
    /// Lists chat threads, most recently updated first.
    Threads {
        /// The user database, plain or protected.
        file: PathBuf,
        /// Only this app's threads.
        #[arg(long)]
        app: Option<String>,
        #[command(flatten)]
        secrets: SecretArgs,
    },
    /// Lists a thread's messages in order.
    Messages {
        /// The user database, plain or protected.
        file: PathBuf,
        /// The thread.
        #[arg(long)]
        thread: String,
        /// Only messages with a larger id.
        #[arg(long, value_name = "ID")]
        after: Option<i64>,
        /// At most this many.
        #[arg(long)]
        limit: Option<usize>,
        #[command(flatten)]
        secrets: SecretArgs,
    },
}

pub(crate) fn run_chat(command: ChatCommand, limits: &Limits) -> Result<Outcome, Failure> {
    match command {
        ChatCommand::Append {
            file,
            thread,
            role,
            content,
            content_file,
            app,
            title,
            pinned,
            meta,
        } => {
            let role = ChatRole::parse(&role).ok_or_else(|| {
                invalid(format!(
                    "--role {role:?}: the role is user, assistant or system"
                ))
            })?;
            let content = match (content, content_file) {
                (Some(text), _) => text,
                (None, Some(path)) => read_text(&path)?,
                (None, None) => {
                    return Err(Failure::usage(
                        "give the message: --content or --content-file",
                    ));
                }
            };
            let meta = meta
                .as_deref()
                .map(|m| parse_json("--meta", m))
                .transpose()?;
            let message = NewChatMessage {
                thread_id: thread.clone(),
                app_id: app,
                title,
                role,
                content,
                pinned,
                meta,
            };
            let (id, length) = write(&file, |db| Ok(changed(db.append_chat_message(&message)?)))?;
            Ok(written(
                &file,
                length,
                format!("Appended message {id} to thread {thread}"),
                json!({ "thread_id": thread, "message_id": id }),
            ))
        }
        ChatCommand::Prune { file, thread, keep } => {
            let (deleted, length) = write(&file, |db| {
                let deleted = db.prune_chat_messages(&thread, keep)?;
                Ok(Change {
                    result: deleted,
                    changed: deleted > 0,
                })
            })?;
            Ok(written(
                &file,
                length,
                format!("Pruned {deleted} message(s) from thread {thread}"),
                json!({ "thread_id": thread, "deleted": deleted }),
            ))
        }
        ChatCommand::Pin {
            file,
            message,
            unpin,
        } => {
            let ((), length) = write(&file, |db| {
                Ok(changed(db.pin_chat_message(message, !unpin)?))
            })?;
            Ok(written(
                &file,
                length,
                format!(
                    "{} message {message}",
                    if unpin { "Unpinned" } else { "Pinned" }
                ),
                json!({ "message_id": message, "pinned": !unpin }),
            ))
        }
        ChatCommand::Delete { file, thread } => {
            let (deleted, length) =
                write(&file, |db| Ok(changed(db.delete_chat_thread(&thread)?)))?;
            Ok(written(
                &file,
                length,
                format!("Deleted thread {thread} and its {deleted} message(s)"),
                json!({ "thread_id": thread, "deleted": deleted }),
            ))
        }
        ChatCommand::Threads { file, app, secrets } => {
            let db = read(&file, &secrets, limits)?;
            let threads = db.chat_threads(app.as_deref())?;
            let mut text = format!("{} thread(s)", threads.len());
            for t in &threads {
                text.push_str(&format!(
                    "\n  {}  {}{}",
                    t.thread_id,
                    t.title.as_deref().unwrap_or(""),
                    t.app_id
                        .as_deref()
                        .map(|a| format!(" (app {a})"))
                        .unwrap_or_default()
                ));
            }
            Ok(read_outcome(text, json!({ "threads": threads })))
        }
        ChatCommand::Messages {
            file,
            thread,
            after,
            limit,
            secrets,
        } => {
            let db = read(&file, &secrets, limits)?;
            let after = after.unwrap_or(i64::MIN);
            let mut messages: Vec<_> = db
                .chat_messages(&thread)?
                .into_iter()
                .filter(|m| m.id > after)
                .collect();
            let limit = limit.unwrap_or(usize::MAX);
            let more = messages.len() > limit;
            messages.truncate(limit);
            let mut text = format!("thread {thread}: {} message(s)", messages.len());
            for m in &messages {
                text.push_str(&format!(
                    "\n  [{}] {}{}: {}",
                    m.id,
                    m.role.as_str(),
                    if m.pinned { " (pinned)" } else { "" },
                    m.content
                ));
            }
            if more {
                text.push_str("\n  … more: ask again with --after the last id");
            }
            Ok(read_outcome(
                text,
                json!({ "thread_id": thread, "messages": messages, "more": more }),
            ))
        }
    }
}
