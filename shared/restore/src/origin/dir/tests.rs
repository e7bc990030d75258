//! Tests of the directory origin: compare-and-swap on the revision, a download that is exactly the
//! described revision, and a torn origin reported as inconsistent rather than trusted.

#![allow(clippy::unwrap_used, reason = "tests")]

use super::*;

fn accepted(pushed: Pushed) -> String {
    match pushed {
        Pushed::Accepted { revision } => revision,
        Pushed::Conflict { current } => panic!("a conflict with {current:?}"),
    }
}

fn downloaded(origin: &DirOrigin, snapshot: &SnapshotInfo) -> Result<Vec<u8>, OriginError> {
    let mut sink = Vec::new();
    origin.download(snapshot, &mut sink).map(|()| sink)
}

#[test]
fn a_push_lands_only_on_the_revision_it_replaces() {
    let dir = tempfile::tempdir().unwrap();
    let origin = DirOrigin::new(dir.path().join("origin"));
    assert!(origin.is_personal());
    let err = origin.head().unwrap_err();
    assert_eq!(err.reason(), "NO_ORIGIN", "{err}");

    std::fs::create_dir(origin.dir()).unwrap();
    assert_eq!(origin.head().unwrap(), None);
    assert_eq!(
        origin.push(b"one", Some("r1-0000000000000000")).unwrap(),
        Pushed::Conflict { current: None }
    );
    let first = accepted(origin.push(b"one", None).unwrap());
    assert!(first.starts_with("r1-") && first.len() == 19, "{first}");
    let head = origin.head().unwrap().unwrap();
    assert_eq!(head.revision, first);
    assert_eq!(head.size, 3);
    assert_eq!(head.sha256_hex(), hex::encode(Sha256::digest(b"one")));
    assert_eq!(head.storage_version, None, "not a SQLite header");
    assert_eq!(downloaded(&origin, &head).unwrap(), b"one");

    assert_eq!(
        origin.push(b"two", None).unwrap(),
        Pushed::Conflict {
            current: Some(first.clone())
        }
    );
    let second = accepted(origin.push(b"two", Some(&first)).unwrap());
    assert!(second.starts_with("r2-"), "{second}");
    // A directory keeps only its current revision.
    let err = origin
        .describe(&Selector::Revision(first.clone()))
        .unwrap_err();
    assert_eq!(err.reason(), "REVISION_NOT_FOUND");
    let err = downloaded(&origin, &head).unwrap_err();
    assert_eq!(err.reason(), "ORIGIN_MOVED", "{err}");
}

#[test]
fn a_torn_origin_is_inconsistent_and_the_retried_push_completes_it() {
    let dir = tempfile::tempdir().unwrap();
    let origin = DirOrigin::new(dir.path().to_owned());
    accepted(origin.push(b"one", None).unwrap());
    let head = origin.head().unwrap().unwrap();
    let image = dir.path().join(DIR_IMAGE);
    for torn in [&b"two"[..], b"longer"] {
        std::fs::write(&image, torn).unwrap();
        let err = downloaded(&origin, &head).unwrap_err();
        assert_eq!(err.reason(), "ORIGIN_INCONSISTENT", "{err}");
    }

    // A first push interrupted before its revision file: refused to readers, completed by a
    // first push.
    std::fs::remove_file(dir.path().join(DIR_REVISION)).unwrap();
    let err = origin.head().unwrap_err();
    assert_eq!(err.reason(), "ORIGIN_INCONSISTENT", "{err}");
    let revision = accepted(origin.push(b"one", None).unwrap());
    assert_eq!(origin.head().unwrap().unwrap().revision, revision);
}
