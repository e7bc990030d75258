//! A download progress bar on stderr, drawn only when stderr is a terminal: scripts and `--json`
//! consumers reading a pipe or a file never see control characters.

use std::io::{IsTerminal as _, Write as _};

use snug_restore::Progress;

/// Cells in the bar itself.
const WIDTH: usize = 30;

/// A one-line bar redrawn in place (`\r`), at most once per tenth of a percent.
pub(crate) struct ProgressBar {
    label: String,
    enabled: bool,
    /// Tenths of a percent last drawn.
    drawn: Option<u64>,
}

impl ProgressBar {
    /// A bar labelled `label`, live only if stderr is a terminal.
    pub(crate) fn on_stderr(label: impl Into<String>) -> Self {
        Self {
            label: label.into(),
            enabled: std::io::stderr().is_terminal(),
            drawn: None,
        }
    }

    pub(crate) fn update(&mut self, progress: Progress) {
        if !self.enabled {
            return;
        }
        let permille = permille(progress);
        if self.drawn == Some(permille) {
            return;
        }
        self.drawn = Some(permille);
        let mut stderr = std::io::stderr().lock();
        let _ = write!(stderr, "\r{} {}", self.label, render(progress));
        let _ = stderr.flush();
    }
}

impl Drop for ProgressBar {
    /// Clears the line, so what follows (the result, or an error) starts at column 0.
    fn drop(&mut self) {
        if self.drawn.is_some() {
            let mut stderr = std::io::stderr().lock();
            let _ = write!(stderr, "\r\x1b[2K");
            let _ = stderr.flush();
        }
    }
}

fn permille(progress: Progress) -> u64 {
    if progress.total == 0 {
        return 1000;
    }
    (u128::from(progress.received.min(progress.total)) * 1000 / u128::from(progress.total)) as u64
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// The bar's text: `[#########.....................]  30.0%  1.2/4.0 MiB`.
pub(crate) fn render(progress: Progress) -> String {
    let permille = permille(progress);
    let filled = (permille as usize * WIDTH) / 1000;
    format!(
        "[{}{}] {:>5.1}%  {:.1}/{:.1} MiB",
        "#".repeat(filled),
        ".".repeat(WIDTH - filled),
        permille as f64 / 10.0,
        mib(progress.received),
        mib(progress.total)
    )
}

#[cfg(test)]
mod tests;
