//! `snug_app_schemas.schema_json`: an app's runtime DDL, verbatim, in creation order, and its
//! AUTOINCREMENT counters.
//!
//! The text format is the reference's exactly, so files move between the two:
//! `{"objects":[{"type":"table","name":"trades","ddl":"CREATE TABLE trades (…)"},…],"sequences":{"trades":3}}`.
//! Key order is `objects` then `sequences`; each object is `type`, `name`, `ddl`; `sequences` is
//! omitted when empty and lists counters in the runtime's `sqlite_sequence` order. `snug_kv` is
//! never listed.

use serde::Serialize;
use serde::ser::{SerializeMap, Serializer};

/// The kind of a schema object (`sqlite_master.type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ObjectKind {
    /// `CREATE TABLE`.
    Table,
    /// `CREATE INDEX`.
    Index,
    /// `CREATE TRIGGER`.
    Trigger,
    /// `CREATE VIEW`.
    View,
}

impl ObjectKind {
    /// Parses `sqlite_master.type`.
    pub fn parse(kind: &str) -> Option<ObjectKind> {
        match kind {
            "table" => Some(ObjectKind::Table),
            "index" => Some(ObjectKind::Index),
            "trigger" => Some(ObjectKind::Trigger),
            "view" => Some(ObjectKind::View),
            _ => None,
        }
    }

    /// Returns `sqlite_master.type`.
    pub fn as_str(self) -> &'static str {
        match self {
            ObjectKind::Table => "table",
            ObjectKind::Index => "index",
            ObjectKind::Trigger => "trigger",
            ObjectKind::View => "view",
        }
    }
}

impl std::fmt::Display for ObjectKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One object of an app's schema: its kind, natural name and verbatim DDL.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct SchemaObject {
    /// What the statement creates.
    #[serde(rename = "type")]
    pub kind: ObjectKind,
    /// The object's natural name.
    pub name: String,
    /// `sqlite_master.sql` from the runtime, never rewritten.
    pub ddl: String,
}

/// An app's registered schema (`schema_json`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AppSchema {
    /// Objects in creation order (a valid replay order).
    pub objects: Vec<SchemaObject>,
    /// AUTOINCREMENT counters by natural table name, in `sqlite_sequence` order.
    pub sequences: Vec<(String, i64)>,
}

/// Why a stored `schema_json` cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
#[serde(tag = "problem", rename_all = "snake_case")]
pub enum SchemaJsonProblem {
    /// Not JSON, or not the `{"objects":[…],"sequences":{…}}` shape.
    #[error("schema_json is not the expected JSON shape: {detail}")]
    Shape {
        /// serde_json's description, with the position.
        detail: String,
    },
    /// An object whose `type` is not table, index, trigger or view.
    #[error("schema_json object {index} has unknown type {kind:?}")]
    UnknownKind {
        /// Position in `objects`.
        index: usize,
        /// The type found.
        kind: String,
    },
    /// A counter that is not an integer.
    #[error("schema_json sequence {table:?} is not an integer")]
    BadSequence {
        /// The table it names.
        table: String,
    },
}

#[derive(serde::Deserialize)]
struct RawSchema {
    objects: Vec<RawObject>,
    #[serde(default)]
    sequences: Option<serde_json::Map<String, serde_json::Value>>,
}

#[derive(serde::Deserialize)]
struct RawObject {
    #[serde(rename = "type")]
    kind: String,
    name: String,
    ddl: String,
}

impl AppSchema {
    /// Parses a stored `schema_json`. Unknown keys are ignored (a later writer may add some).
    ///
    /// Counter order is not preserved on read: nothing depends on it, and the writer's order is
    /// recomputed from the runtime on every persist.
    pub fn parse(text: &str) -> Result<AppSchema, SchemaJsonProblem> {
        let raw: RawSchema =
            serde_json::from_str(text).map_err(|err| SchemaJsonProblem::Shape {
                detail: err.to_string(),
            })?;
        let objects = raw
            .objects
            .into_iter()
            .enumerate()
            .map(|(index, object)| {
                let kind =
                    ObjectKind::parse(&object.kind).ok_or(SchemaJsonProblem::UnknownKind {
                        index,
                        kind: object.kind,
                    })?;
                Ok(SchemaObject {
                    kind,
                    name: object.name,
                    ddl: object.ddl,
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let sequences = raw
            .sequences
            .unwrap_or_default()
            .into_iter()
            .map(|(table, value)| match value.as_i64() {
                Some(seq) => Ok((table, seq)),
                None => Err(SchemaJsonProblem::BadSequence { table }),
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(AppSchema { objects, sequences })
    }

    /// Returns the `schema_json` text, byte-compatible with the reference's `JSON.stringify`.
    pub fn to_json(&self) -> String {
        // serde_json escapes exactly what JSON.stringify escapes for valid UTF-8 (quote,
        // backslash, control characters) and writes no whitespace.
        serde_json::to_string(self).unwrap_or_else(|_| String::from("{\"objects\":[]}"))
    }

    /// Returns whether there is nothing to register (no objects: the row is deleted).
    pub fn is_empty(&self) -> bool {
        self.objects.is_empty()
    }

    /// Returns the DDL registered for table `name`.
    pub fn table_ddl(&self, name: &str) -> Option<&str> {
        self.objects
            .iter()
            .find(|o| o.kind == ObjectKind::Table && o.name == name)
            .map(|o| o.ddl.as_str())
    }

    /// Returns whether `other` registers the same schema: the same objects (kind, name and DDL)
    /// and the same counters, in any order.
    ///
    /// Order is ignored because a materialized runtime lists tables before the other objects
    /// (the replay order), so a file written in another valid order would otherwise be
    /// rewritten although nothing changed.
    pub fn same_as(&self, other: &AppSchema) -> bool {
        let mut mine: Vec<&SchemaObject> = self.objects.iter().collect();
        let mut theirs: Vec<&SchemaObject> = other.objects.iter().collect();
        mine.sort();
        theirs.sort();
        let mut my_seqs = self.sequences.clone();
        let mut their_seqs = other.sequences.clone();
        my_seqs.sort();
        their_seqs.sort();
        mine == theirs && my_seqs == their_seqs
    }
}

impl Serialize for AppSchema {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        struct Sequences<'a>(&'a [(String, i64)]);
        impl Serialize for Sequences<'_> {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                let mut map = serializer.serialize_map(Some(self.0.len()))?;
                for (table, seq) in self.0 {
                    map.serialize_entry(table, seq)?;
                }
                map.end()
            }
        }
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("objects", &self.objects)?;
        if !self.sequences.is_empty() {
            map.serialize_entry("sequences", &Sequences(&self.sequences))?;
        }
        map.end()
    }
}

#[cfg(test)]
mod tests;
