//! What a service runs with beside its configuration: the handles the composition root builds
//! once per process and hands to every service it composes.
//!
//! Configuration is what an operator says (flags and `SNUG_*` variables), parsed and then never
//! mutated; a runtime is what the process makes of it (the upload budget its services share, the
//! sealer a sync store shares with the gateway in the same process, the directory a component
//! keeps its files in). Keeping them apart, as linkerd's `Config` and its runtime are, means a
//! clap struct never carries a handle set after parsing, and two services of one process share a
//! budget because they were given the same one, not because each copy was overwritten.

use std::path::PathBuf;

use snug_files::sealed::Sealer;

use crate::{budget::UploadBudget, server::ServerConfig};

/// The handles one service runs with.
#[derive(Debug, Clone)]
pub struct Runtime {
    /// Bytes of uploads the process's services hold in memory at once, shared by clones.
    pub upload_budget: UploadBudget,
    /// Where a store seals the images it keeps in memory for the gateway's zero-copy sends; a
    /// disabled one unless the gateway shares the process.
    pub sealer: Sealer,
    /// Where this component keeps its files: its own subdirectory of the process's data
    /// directory, whose layout the composition root owns.
    pub dir: PathBuf,
}

impl Default for Runtime {
    /// The default budget, no sealing, files under `./snug-data`: what a component gets when
    /// nobody composes it (tests, examples).
    fn default() -> Self {
        Self {
            upload_budget: UploadBudget::default(),
            sealer: Sealer::disabled(),
            dir: PathBuf::from("./snug-data"),
        }
    }
}

impl Runtime {
    /// The runtime of a process serving with `server`: its upload budget (size, wait and pace
    /// from the configuration), no sealing, files in `dir`.
    pub fn for_server(server: &ServerConfig, dir: PathBuf) -> Self {
        Self {
            upload_budget: server.upload_budget(),
            sealer: Sealer::disabled(),
            dir,
        }
    }

    /// This runtime with its files in `dir` (another component's subdirectory); the budget and
    /// the sealer stay shared.
    pub fn in_dir(&self, dir: PathBuf) -> Self {
        Self {
            dir,
            ..self.clone()
        }
    }

    /// This runtime with its uploads admitted against `budget`.
    pub fn with_budget(mut self, budget: UploadBudget) -> Self {
        self.upload_budget = budget;
        self
    }
}
