//! Sixteen writers race 200 puts each on one user; history must come out as one linear chain
//! containing every acknowledged write.

mod support;

use std::{collections::HashMap, sync::Arc, time::Instant};

use snug_revstore::{Digest, Precondition, PutError, ReadError, RevStore, Revision};
use support::*;

const WRITERS: u64 = 16;
const PUTS: u64 = 200;

async fn race<S: RevStore>(store: S) {
    let store = Arc::new(store);
    let u = user("contended");
    store.provision_user(&u).await.expect("provision");
    let started = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..WRITERS {
        let store = store.clone();
        let u = u.clone();
        tasks.push(tokio::spawn(async move {
            let mut acked: Vec<(Revision, Option<Revision>, Digest)> = Vec::new();
            let mut refused = 0u64;
            for i in 0..PUTS {
                let precondition = match store.head(&u).await {
                    Ok(info) => Precondition::MustMatch(info.revision),
                    Err(ReadError::NotFound) => Precondition::MustNotExist,
                    Err(e) => panic!("head failed: {e:?}"),
                };
                let bytes = image(w * 1_000_000 + i, 1500 + (i as usize % 7) * 100);
                match put(&*store, &u, precondition.clone(), &bytes).await {
                    Ok(outcome) => {
                        assert!(!outcome.replayed, "distinct bytes never replay");
                        assert_eq!(outcome.info.base.as_ref(), precondition.base());
                        acked.push((outcome.info.revision, outcome.info.base, Digest::of(&bytes)));
                    }
                    Err(PutError::Conflict { .. } | PutError::Stale { .. }) => refused += 1,
                    Err(e) => panic!("put failed: {e:?}"),
                }
            }
            (acked, refused)
        }));
    }
    let mut acked: HashMap<Revision, (Option<Revision>, Digest)> = HashMap::new();
    let mut refused = 0;
    for t in tasks {
        let (a, r) = t.await.expect("writer");
        refused += r;
        for (rev, base, digest) in a {
            assert!(
                acked.insert(rev, (base, digest)).is_none(),
                "a revision was acknowledged twice"
            );
        }
    }
    let elapsed = started.elapsed();
    assert_eq!(acked.len() as u64 + refused, WRITERS * PUTS);
    let mut history = store
        .list_revisions(&u, usize::MAX >> 1)
        .await
        .expect("history");
    history.reverse();
    assert_eq!(
        history.len(),
        acked.len(),
        "history holds exactly the acknowledged writes"
    );
    let mut previous: Option<Revision> = None;
    for info in &history {
        assert_eq!(
            info.base, previous,
            "each accepted put's base is the previous accepted revision"
        );
        let (base, digest) = acked
            .get(&info.revision)
            .expect("every history row was acknowledged");
        assert_eq!((&info.base, &info.digest), (base, digest));
        previous = Some(info.revision.clone());
    }
    assert_eq!(
        store.head(&u).await.expect("head").revision,
        previous.expect("at least one write")
    );
    assert_clean(&*store).await;
    eprintln!(
        "{}: {} accepted, {} refused of {} attempts in {:.2?}",
        store.backend(),
        acked.len(),
        refused,
        WRITERS * PUTS,
        elapsed
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixteen_writers_on_one_user_sqlite() {
    let fx = sqlite(Tune::default()).await.expect("sqlite");
    race(fx.store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixteen_writers_on_one_user_memory() {
    let fx = mem(Tune::default()).await.expect("memory");
    race(fx.store).await;
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixteen_writers_on_one_user_postgres() {
    let Some(fx) = pg(Tune::default()).await else {
        return;
    };
    race(fx.store).await;
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixteen_writers_on_one_user_postgres_objects() {
    let Some(fx) = pg_objects(Tune::default()).await else {
        return;
    };
    race(fx.store).await;
}
