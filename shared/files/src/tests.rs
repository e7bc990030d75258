//! Tests for atomic replacement: the destination is whole or untouched, and no temp file remains.

use super::*;

fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .expect("read dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn replaces_and_leaves_no_temp_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let dest = dir.path().join("user.snug");
    fs::write(&dest, b"old").expect("seed");
    write_atomically(&dest, b"new bytes").expect("write");
    assert_eq!(fs::read(&dest).expect("read"), b"new bytes");
    assert_eq!(entries(dir.path()), vec!["user.snug".to_owned()]);
}

#[test]
fn failed_fill_keeps_destination_and_removes_temp() {
    let dir = tempfile::tempdir().expect("tempdir");
    let dest = dir.path().join("user.snug");
    fs::write(&dest, b"precious").expect("seed");
    let err = write_atomically_with(&dest, |f| {
        f.write_all(b"half")?;
        Err(io::Error::other("interrupted"))
    })
    .expect_err("fill fails");
    assert_eq!(err.to_string(), "interrupted");
    assert_eq!(fs::read(&dest).expect("read"), b"precious");
    assert_eq!(entries(dir.path()), vec!["user.snug".to_owned()]);
}

#[test]
fn missing_directory_is_an_error_not_a_panic() {
    let dir = tempfile::tempdir().expect("tempdir");
    let dest = dir.path().join("no/such/dir/user.snug");
    assert!(write_atomically(&dest, b"x").is_err());
}

#[test]
fn a_new_file_is_created_whole_and_never_replaces_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let dest = dir.path().join("user.snug");
    write_new_atomically(&dest, b"adopted").expect("create");
    assert_eq!(fs::read(&dest).expect("read"), b"adopted");
    let err = write_new_atomically(&dest, b"second").expect_err("exists");
    assert_eq!(err.kind(), io::ErrorKind::AlreadyExists);
    assert_eq!(fs::read(&dest).expect("read"), b"adopted");
    assert_eq!(entries(dir.path()), vec!["user.snug".to_owned()]);
}
