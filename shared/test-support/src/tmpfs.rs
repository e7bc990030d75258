//! A small file system that fills up: a `tmpfs` of a fixed size mounted on a fresh temporary
//! directory, for the full-disk tests (a store's data directory on it runs out of space with a
//! real `ENOSPC` from the kernel, not a simulated error).
//!
//! Mounting needs root (`CAP_SYS_ADMIN`). [`Tmpfs::mount_if_possible`] returns `None` and says so
//! on stderr when the process is not root; as root a failed mount is a skip too, unless
//! `SNUG_REQUIRE_GARAGE=1` (`.ci/run`'s mark of a CI run that must run every backing-service
//! test), where it panics. Dropping the [`Tmpfs`] unmounts it (lazily if something still holds a
//! file on it), also when the test panicked.

use std::{
    io::Write as _,
    path::Path,
    process::{Command, Output},
};

/// A mounted `tmpfs`; unmounted on drop.
#[derive(Debug)]
pub struct Tmpfs {
    dir: tempfile::TempDir,
    size: u64,
}

impl Tmpfs {
    /// Mounts a `tmpfs` of `size` bytes on a fresh temporary directory, or returns `None` (after
    /// saying why on stderr) where that is impossible; see the module docs.
    #[track_caller]
    pub fn mount_if_possible(size: u64) -> Option<Self> {
        let test = std::thread::current().name().unwrap_or("test").to_owned();
        if !is_root() {
            let _ = writeln!(
                std::io::stderr(),
                "{test} SKIPPED: mounting a tmpfs needs root"
            );
            return None;
        }
        let dir = tempfile::Builder::new()
            .prefix("snug-tmpfs-")
            .tempdir()
            .expect("a mount point");
        let output = run(Command::new("mount")
            .args(["-t", "tmpfs", "-o"])
            .arg(format!("size={size},mode=0755"))
            .arg("snug-test-tmpfs")
            .arg(dir.path()));
        if !output.status.success() {
            let stderr = String::from_utf8_lossy(&output.stderr).trim().to_owned();
            let required = std::env::var("SNUG_REQUIRE_GARAGE").is_ok_and(|v| v == "1");
            assert!(
                !required,
                "SNUG_REQUIRE_GARAGE=1 (CI) but mounting a tmpfs as root failed: {stderr}"
            );
            let _ = writeln!(
                std::io::stderr(),
                "{test} SKIPPED: mount -t tmpfs failed as root ({stderr}; SNUG_REQUIRE_GARAGE=1 \
                 makes this a failure)"
            );
            return None;
        }
        Some(Self { dir, size })
    }

    /// The mount point.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Its size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        // Before the directory goes (the field drops after this). A file still open on it (a
        // store a panicking test did not drop) makes a plain unmount fail: detach it instead.
        if !run(Command::new("umount").arg(self.dir.path()))
            .status
            .success()
        {
            let _ = run(Command::new("umount").arg("-l").arg(self.dir.path()));
        }
    }
}

fn run(command: &mut Command) -> Output {
    command
        .output()
        .unwrap_or_else(|err| panic!("run {command:?}: {err}"))
}

/// Whether the process runs as uid 0 (`/proc/self/status`: no `libc` for one call).
fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|status| {
        status
            .lines()
            .find_map(|line| line.strip_prefix("Uid:"))
            .and_then(|ids| ids.split_whitespace().nth(1))
            == Some("0")
    })
}
