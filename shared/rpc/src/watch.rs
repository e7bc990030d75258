//! What brings a watcher of one user's revisions up to date: the rule of `WatchImage`, written
//! once for the sync service that serves the call and the gateway that fans one user's changes
//! out to many event streams.
//!
//! A watcher remembers what it was sent last ([`Sent`]); on each wake it reads the user's
//! history (newest first, at most [`PAGE`]) and [`catch_up`] says what to send: the revisions
//! after the last one sent, oldest first; [`Event::NoImage`] when the user has none (any more:
//! an erasure); [`Event::Gap`] and the current revision when the page does not reach back to the
//! last one sent (further back than a read reaches, or not the user's at all).

use snug_proto::sync::v1 as pb;

/// How many revisions one read of the history returns: more new ones than this since the last
/// sent, and the watcher is told of a gap instead of each.
pub const PAGE: usize = 64;

/// What a watcher sent last.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Sent {
    /// Nothing yet.
    Nothing,
    /// That the user has no image.
    NoImage,
    /// This revision (its token).
    Revision(String),
}

/// One event for a watcher.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// A revision: the current one, or one committed since the last sent.
    Revision(pb::RevisionInfo),
    /// The user has no image.
    NoImage,
    /// Revisions may have been committed that are not listed.
    Gap,
}

/// The events that bring a watcher who was sent `sent` up to `history` (the user's revisions,
/// newest first, at most [`PAGE`]), and what it has been sent after them.
pub fn catch_up(sent: &Sent, history: &[pb::RevisionInfo]) -> (Vec<Event>, Sent) {
    let Some(current) = history.first() else {
        return match sent {
            Sent::NoImage => (Vec::new(), Sent::NoImage),
            Sent::Nothing | Sent::Revision(_) => (vec![Event::NoImage], Sent::NoImage),
        };
    };
    let now = Sent::Revision(current.revision.clone());
    let events = match sent {
        Sent::Nothing | Sent::NoImage => vec![Event::Revision(current.clone())],
        Sent::Revision(last) => match history.iter().position(|info| info.revision == *last) {
            Some(newer) => history[..newer]
                .iter()
                .rev()
                .cloned()
                .map(Event::Revision)
                .collect(),
            None => vec![Event::Gap, Event::Revision(current.clone())],
        },
    };
    (events, now)
}

impl Event {
    /// The event as `WatchImage` sends it.
    pub fn message(self) -> pb::WatchImageResponse {
        use pb::watch_image_response::Event as E;
        let event = match self {
            Self::Revision(info) => E::Revision(info),
            Self::NoImage => E::NoImage(pb::watch_image_response::NoImage {}),
            Self::Gap => E::Gap(pb::watch_image_response::Gap {}),
        };
        pb::WatchImageResponse { event: Some(event) }
    }
}

#[cfg(test)]
mod tests;
