//! Stored manifests: every history resolves to what was stored, through any deletion order.

use std::collections::{HashMap, HashSet};

use bytes::Bytes;
use proptest::prelude::*;

use super::*;
use crate::{Precondition, Principal, PutRequest, RevStore, StoreConfig, UserId};

fn addr(n: u8) -> Digest {
    Digest([n; 32])
}

/// A toy store of rows keyed by image digest, resolved the way a backend's chain query reads.
#[derive(Default)]
struct Rows(HashMap<Digest, Row>);

impl Rows {
    fn chain(&self, digest: &Digest) -> Vec<(Digest, Row)> {
        let mut out = Vec::new();
        let mut next = Some(*digest);
        while let Some(d) = next.filter(|_| out.len() <= MAX_CHAIN + 1) {
            let Some(row) = self.0.get(&d) else { break };
            next = row.base;
            out.push((d, row.clone()));
        }
        out
    }

    fn resolve(&self, digest: &Digest) -> Option<Resolved> {
        resolve(&self.chain(digest))
    }

    /// Deletes `digest` as a backend does: its children rebased first.
    fn delete(&mut self, digest: &Digest) {
        let parent = self.0.remove(digest).expect("stored");
        for (d, child) in self.0.iter_mut() {
            if child.base == Some(*digest) {
                *child = rebase(digest, &parent, child).unwrap_or_else(|| panic!("rebase {d}"));
            }
        }
    }
}

#[test]
fn a_small_change_is_stored_as_a_small_patch() {
    let base: Vec<Digest> = (0..200).map(addr).collect();
    let resolved = Resolved {
        chunks: base.clone(),
        depth: 0,
    };
    let mut next = base.clone();
    next[7] = addr(250);
    next.push(addr(251));
    let row = store(&next, Some((&addr(1), &resolved)));
    assert_eq!(row.base, Some(addr(1)));
    assert_eq!(row.body.len(), HEADER + 2 * ENTRY);
    assert_eq!(entries(&row), Some(vec![addr(250), addr(251)]));

    // Shorter than its base, most chunks changed, or a chain already at its cap: stored whole.
    let cases: [(&str, Vec<Digest>, usize, bool); 4] = [
        ("truncated", base[..150].to_vec(), 0, true),
        (
            "rewritten",
            (0..200).map(|i| addr(i as u8 ^ 0x80)).collect(),
            0,
            false,
        ),
        ("long chain", next.clone(), MAX_CHAIN, false),
        ("under the cap", next.clone(), MAX_CHAIN - 1, true),
    ];
    for (name, chunks, depth, patched) in cases {
        let against = Resolved {
            chunks: base.clone(),
            depth,
        };
        let row = store(&chunks, Some((&addr(1), &against)));
        assert_eq!(row.base.is_some(), patched, "{name}");
    }
    assert_eq!(store(&next, None), Row::whole(&next));
}

#[test]
fn rows_that_do_not_form_a_chain_do_not_resolve() {
    let whole = Row::whole(&[addr(1), addr(2)]);
    let patch = Row::patch(addr(10), 3, &[(2, addr(3))]);
    let cases: [(&str, Vec<(Digest, Row)>); 7] = [
        ("nothing", vec![]),
        ("patch without its base", vec![(addr(11), patch.clone())]),
        (
            "wrong base",
            vec![(addr(11), patch.clone()), (addr(12), whole.clone())],
        ),
        (
            "growth not covered",
            vec![
                (addr(11), Row::patch(addr(10), 4, &[(2, addr(3))])),
                (addr(10), whole.clone()),
            ],
        ),
        (
            "index past the end",
            vec![
                (
                    addr(11),
                    Row {
                        base: Some(addr(10)),
                        body: [&3u64.to_le_bytes()[..], &7u32.to_le_bytes(), &[5; 32]].concat(),
                    },
                ),
                (addr(10), whole.clone()),
            ],
        ),
        (
            "torn whole",
            vec![(
                addr(10),
                Row {
                    base: None,
                    body: vec![0; 33],
                },
            )],
        ),
        (
            "a chain too long",
            std::iter::repeat_n((addr(10), Row::patch(addr(10), 2, &[])), MAX_CHAIN + 1)
                .chain([(addr(10), whole.clone())])
                .collect(),
        ),
    ];
    for (name, chain) in cases {
        assert_eq!(resolve(&chain), None, "{name}");
    }
    let good = [(addr(11), patch), (addr(10), whole)];
    assert_eq!(
        resolve(&good),
        Some(Resolved {
            chunks: vec![addr(1), addr(2), addr(3)],
            depth: 1
        })
    );
}

proptest! {
    /// A history of images, each stored against the one before, resolves to what was stored,
    /// and still does after any of them are deleted in any order; the rows' entries are
    /// exactly the chunks of the images that remain.
    #[test]
    fn histories_resolve_through_deletions(
        edits in prop::collection::vec(prop::collection::vec((0usize..80, 0u8..40), 0..6), 1..24),
        deletions in prop::collection::vec(any::<prop::sample::Index>(), 0..20),
    ) {
        let mut rows = Rows::default();
        let mut images: Vec<(Digest, Vec<Digest>)> = Vec::new();
        let mut chunks: Vec<Digest> = (0..60).map(addr).collect();
        for (n, edit) in edits.iter().enumerate() {
            for (index, value) in edit {
                let value = addr(100 + value);
                match chunks.get_mut(*index) {
                    Some(c) => *c = value,
                    None => chunks.push(value),
                }
            }
            if n % 7 == 3 {
                chunks.truncate(chunks.len() - 3);
            }
            let digest = Digest([n as u8; 32].map(|b| b ^ 0xAA));
            let against = images.last().map(|(d, _)| (*d, rows.resolve(d).expect("resolves")));
            let row = store(&chunks, against.as_ref().map(|(d, r)| (d, r)));
            rows.0.insert(digest, row);
            images.push((digest, chunks.clone()));
        }
        for index in deletions {
            if images.is_empty() {
                break;
            }
            let (digest, _) = images.remove(index.index(images.len()));
            rows.delete(&digest);
            for (d, want) in &images {
                prop_assert_eq!(&rows.resolve(d).expect("resolves").chunks, want);
            }
        }
        let live: HashSet<Digest> = images.iter().flat_map(|(_, c)| c.iter().copied()).collect();
        let named: HashSet<Digest> = rows.0.values().flat_map(|r| entries(r).expect("well formed")).collect();
        prop_assert_eq!(live, named);
        for (d, want) in &images {
            prop_assert_eq!(&rows.resolve(d).expect("resolves").chunks, want);
        }
    }
}

/// How many revisions [`small_edits_store_small_manifests`] writes.
const EDITS: usize = 40;

/// A store configuration whose reclamation takes exactly the first of those revisions.
pub(crate) fn config_for_small_edits() -> StoreConfig {
    StoreConfig {
        retention: crate::Retention {
            keep_newest: EDITS - 1,
            grace: std::time::Duration::ZERO,
            ..crate::Retention::default()
        },
        ..StoreConfig::default()
    }
}

/// Issue 38 point 4, on a store opened with [`config_for_small_edits`]: a revision that changes
/// a few chunks of a large image adds a few entries to the store's manifests (`manifest_bytes`:
/// their stored size), not a whole manifest; the whole one is written again only when its image
/// goes, and every revision still reads back.
pub(crate) async fn small_edits_store_small_manifests<S: RevStore>(
    store: &S,
    chunk: usize,
    manifest_bytes: impl AsyncFn() -> i64,
) {
    let user = UserId::new("u").expect("user");
    store.provision_user(&user).await.expect("provision");
    let pages = 256;
    let mut bytes: Vec<u8> = (0..pages * chunk).map(|i| (i % 251) as u8).collect();
    let mut precondition = Precondition::MustNotExist;
    let mut revisions = Vec::new();
    for i in 0..EDITS {
        // Two pages rewritten per revision, one of them the header page.
        bytes[(i * 37 % pages) * chunk + 9] ^= 0x33;
        bytes[20] = i as u8;
        let request = PutRequest {
            user: user.clone(),
            precondition: precondition.clone(),
            principal: Principal::new("device").expect("principal"),
            idempotency_key: None,
            expected_length: None,
            quota_bytes: None,
        };
        let body = futures::stream::iter([Ok::<_, std::io::Error>(Bytes::from(bytes.clone()))]);
        let info = store.put(request, body).await.expect("put").info;
        precondition = Precondition::MustMatch(info.revision.clone());
        revisions.push((info.revision, bytes.clone()));
    }
    let whole = (pages * 32) as i64;
    let patch = (HEADER + 2 * ENTRY) as i64;
    assert_eq!(
        manifest_bytes().await,
        whole + (EDITS as i64 - 1) * patch,
        "one whole manifest, then two entries a revision"
    );
    let reader = Principal::new("reader").expect("principal");
    let read = async |revision| {
        store
            .get_revision(&user, revision, &reader)
            .await
            .expect("get")
            .body
            .read_to_vec()
            .await
            .expect("read")
    };
    for (revision, want) in &revisions {
        assert!(read(revision).await == *want, "{revision} reads back");
    }
    // The first image goes: the second is written whole in its place, the rest stay patches.
    let report = store.reclaim().await.expect("reclaim");
    assert_eq!(report.images, 1, "{report:?}");
    assert_eq!(manifest_bytes().await, whole + (EDITS as i64 - 2) * patch);
    for (revision, want) in &revisions[1..] {
        assert!(read(revision).await == *want, "{revision} reads back");
    }
    let check = store.check_integrity().await.expect("check");
    assert!(check.problems.is_empty(), "{check:?}");
}
