//! The memory store's side of a reclamation pass.

use super::*;

impl reclaim::Reclaimer for MemStore {
    type Pass<'a> = MemPass<'a>;

    fn faults(&self) -> &crate::config::Faults {
        &self.inner.config.faults
    }

    async fn list(&self) -> Result<Vec<Listed>, ReclaimError> {
        if self.inner.config.faults.incomplete_listing() {
            return Err(ReclaimError::IncompleteListing);
        }
        // Chunks live in the state itself: there are no objects at rest.
        Ok(Vec::new())
    }

    async fn begin(&self, _taking: reclaim::Taking<'_>) -> Result<MemPass<'_>, StorageError> {
        Ok(MemPass {
            state: self.lock(),
            leases: &self.inner.leases,
        })
    }
}

/// A pass over the memory store: its state, locked.
pub(crate) struct MemPass<'a> {
    state: MutexGuard<'a, State>,
    leases: &'a Leases,
}

impl reclaim::Pass for MemPass<'_> {
    async fn publications(
        &mut self,
        scope: reclaim::Scope<'_>,
    ) -> Result<Vec<reclaim::Publication>, StorageError> {
        Ok(self
            .state
            .publications
            .iter()
            .filter(|(id, p)| match scope {
                reclaim::Scope::Every => true,
                reclaim::Scope::Record(wanted) => id.to_string() == wanted,
                reclaim::Scope::User(user) => p.user.as_str() == user,
            })
            .map(|(id, p)| reclaim::Publication {
                record: Record {
                    id: id.to_string(),
                    user: p.user.as_str().to_owned(),
                },
                started_at: p.started_at,
                abandoned: p.abandoned,
                // Chunks live in the state itself: a write names no object.
                objects: Vec::new(),
            })
            .collect())
    }

    async fn created_chunks(&mut self, record: &Record) -> Result<Vec<Digest>, StorageError> {
        Ok(record
            .id
            .parse::<u64>()
            .ok()
            .and_then(|id| self.state.publications.get(&id))
            .map(|p| p.created.clone())
            .unwrap_or_default())
    }

    async fn delete_records(&mut self, records: &[Record]) -> Result<(), StorageError> {
        for record in records {
            if let Ok(id) = record.id.parse::<u64>() {
                self.state.publications.remove(&id);
            }
        }
        Ok(())
    }

    async fn in_flight(&mut self) -> Result<InFlight, StorageError> {
        let mut in_flight = InFlight::default();
        for p in self.state.publications.values() {
            if let Some(base) = &p.base {
                in_flight
                    .bases
                    .insert((p.user.as_str().to_owned(), base.to_string()));
            }
            in_flight.images.extend(p.digest);
            in_flight.chunks.extend(p.staged.iter().copied());
        }
        Ok(in_flight)
    }

    async fn named_by_images(
        &mut self,
        chunks: &[Digest],
        _since: Timestamp,
    ) -> Result<HashSet<Digest>, StorageError> {
        let wanted: HashSet<&Digest> = chunks.iter().collect();
        Ok(self
            .state
            .images
            .values()
            .flat_map(|i| i.manifest.iter())
            .filter(|c| wanted.contains(c))
            .copied()
            .collect())
    }

    async fn retained(
        &mut self,
        keep_newest: u64,
        _now: Timestamp,
    ) -> Result<Vec<Retained>, StorageError> {
        let mut out = Vec::new();
        for (user, rec) in &self.state.users {
            let n = rec.revisions.len();
            for (idx, row) in rec.revisions.iter().enumerate() {
                let newer = (n - 1 - idx) as u64;
                if !row.info.retained || newer < keep_newest {
                    continue;
                }
                out.push(Retained {
                    user: user.as_str().to_owned(),
                    seq: idx as i64,
                    revision: row.info.revision.to_string(),
                    candidate: Candidate {
                        newer,
                        current: rec.current == Some(idx),
                        superseded_at: rec.revisions.get(idx + 1).map(|r| r.info.accepted_at),
                        leased: self.leases.is_leased(&row.info.digest),
                        base_in_flight: false,
                    },
                });
            }
        }
        Ok(out)
    }

    async fn release(
        &mut self,
        revisions: &[Retained],
        _now: Timestamp,
    ) -> Result<(), StorageError> {
        for r in revisions {
            let row = self
                .state
                .users
                .iter_mut()
                .find(|(user, _)| user.as_str() == r.user)
                .and_then(|(_, rec)| rec.revisions.get_mut(r.seq as usize));
            if let Some(row) = row {
                row.info.retained = false;
            }
        }
        Ok(())
    }

    async fn unreferenced_images(
        &mut self,
        _now: Timestamp,
    ) -> Result<Vec<Unreferenced>, StorageError> {
        let referenced: HashSet<Digest> = self
            .state
            .users
            .values()
            .flat_map(|rec| rec.revisions.iter())
            .filter(|r| r.info.retained)
            .map(|r| r.info.digest)
            .collect();
        Ok(self
            .state
            .images
            .keys()
            .filter(|d| !referenced.contains(d))
            .map(|d| Unreferenced {
                digest: *d,
                leased: self.leases.is_leased(d),
            })
            .collect())
    }

    // The memory store keeps every manifest whole: no image is kept against another.
    async fn manifest_row(
        &mut self,
        image: &Digest,
    ) -> Result<Option<crate::manifest::Row>, StorageError> {
        Ok(self
            .state
            .images
            .get(image)
            .map(|i| crate::manifest::Row::whole(&i.manifest)))
    }

    async fn kept_against(
        &mut self,
        _image: &Digest,
    ) -> Result<Vec<(Digest, crate::manifest::Row)>, StorageError> {
        Ok(Vec::new())
    }

    async fn set_manifest_row(
        &mut self,
        image: &Digest,
        _row: &crate::manifest::Row,
    ) -> Result<(), StorageError> {
        Err(StorageError::Corrupt {
            object: format!("image {image}: the memory store keeps no manifest against another"),
        })
    }

    async fn delete_image(&mut self, image: &Digest) -> Result<(), StorageError> {
        self.state.images.remove(image);
        Ok(())
    }

    async fn chunk_rows(&mut self) -> Result<Vec<reclaim::ChunkRow>, StorageError> {
        // A put in flight writes its chunks before its image record, and its record names each
        // one it stages (`InFlight::chunks`), which protects them until it lands or goes.
        Ok(self
            .state
            .chunks
            .keys()
            .map(|digest| reclaim::ChunkRow {
                digest: *digest,
                streamed_at: None,
            })
            .collect())
    }

    async fn live_chunks(&mut self) -> Result<HashSet<Digest>, StorageError> {
        Ok(self
            .state
            .images
            .values()
            .flat_map(|i| i.manifest.iter().copied())
            .collect())
    }

    async fn delete_chunks(&mut self, chunks: &[Digest]) -> Result<(), StorageError> {
        for chunk in chunks {
            self.state.chunks.remove(chunk);
        }
        Ok(())
    }

    async fn empty_objects(&mut self) -> Result<Vec<String>, StorageError> {
        Ok(Vec::new())
    }

    async fn unregister_objects(&mut self, _names: &[String]) -> Result<(), StorageError> {
        Ok(())
    }

    async fn registered_objects(&mut self) -> Result<HashSet<String>, StorageError> {
        Ok(HashSet::new())
    }

    async fn pending_wipes(
        &mut self,
    ) -> Result<std::collections::BTreeMap<String, Vec<(u64, u32)>>, StorageError> {
        Ok(std::collections::BTreeMap::new())
    }

    async fn mark_erased(
        &mut self,
        user: &str,
        pseudonym: &str,
        _at: Timestamp,
    ) -> Result<(), StorageError> {
        let (user, pseudonym) = (
            UserId::new(user).map_err(StorageError::unavailable)?,
            UserId::new(pseudonym).map_err(StorageError::unavailable)?,
        );
        if let Some(mut rec) = self.state.users.remove(&user) {
            rec.erased = true;
            self.state.users.insert(pseudonym.clone(), rec);
        }
        let state = &mut *self.state;
        let ledgers = state.served.iter_mut().map(|(u, _)| u);
        for u in ledgers.chain(state.puts.iter_mut().map(|(u, _)| u)) {
            if *u == user {
                *u = pseudonym.clone();
            }
        }
        for entry in &mut state.journal {
            if entry.user.as_ref() == Some(&user) {
                entry.user = Some(pseudonym.clone());
            }
        }
        Ok(())
    }

    async fn tombstones_in_clear(&mut self) -> Result<Vec<String>, StorageError> {
        // Every erasure here renames its tombstone; none was written by an earlier release.
        Ok(Vec::new())
    }

    async fn wipe(&mut self, _object: &str, _ranges: &[(u64, u32)]) -> Result<(), StorageError> {
        Ok(())
    }

    async fn wiped(&mut self, _object: &str) -> Result<(), StorageError> {
        Ok(())
    }

    async fn journal(
        &mut self,
        at: Timestamp,
        kind: ReclaimedKind,
        subjects: &[String],
        user: Option<&str>,
    ) -> Result<(), StorageError> {
        let user = user.and_then(|u| UserId::new(u).ok());
        for subject in subjects {
            self.state.journal.push(JournalEntry {
                at,
                kind,
                subject: subject.clone(),
                user: user.clone(),
            });
        }
        Ok(())
    }

    async fn commit(&mut self, _chunks_deleted: bool) -> Result<(), StorageError> {
        // Every step changed the locked state in place.
        Ok(())
    }

    async fn delete_objects(self, _names: &[String]) -> Result<(), ReclaimError> {
        Ok(())
    }
}

impl reclaim::Erasing for MemPass<'_> {
    async fn history(&mut self, user: &str) -> Result<Vec<(String, Digest)>, StorageError> {
        Ok(self
            .state
            .users
            .iter()
            .filter(|(u, _)| u.as_str() == user)
            .flat_map(|(_, rec)| rec.revisions.iter())
            .map(|r| (r.info.revision.to_string(), r.info.digest))
            .collect())
    }

    async fn delete_history(&mut self, user: &str) -> Result<(), StorageError> {
        if let Some((_, rec)) = self
            .state
            .users
            .iter_mut()
            .find(|(u, _)| u.as_str() == user)
        {
            *rec = UserRec::default();
        }
        Ok(())
    }

    async fn named_chunks(&mut self, images: &[Digest]) -> Result<HashSet<Digest>, StorageError> {
        Ok(images
            .iter()
            .filter_map(|d| self.state.images.get(d))
            .flat_map(|i| i.manifest.iter().copied())
            .collect())
    }

    async fn places(&mut self, chunks: &[Digest]) -> Result<Vec<reclaim::Place>, StorageError> {
        Ok(chunks
            .iter()
            .filter_map(|c| {
                self.state.chunks.get(c).map(|bytes| reclaim::Place {
                    len: bytes.len() as u32,
                    object: None,
                })
            })
            .collect())
    }

    async fn scrub_ledgers(&mut self, user: &str) -> Result<u64, StorageError> {
        let erased = Principal::new(crate::erase::ERASED).map_err(StorageError::unavailable)?;
        let mut scrubbed = 0;
        let State { served, puts, .. } = &mut *self.state;
        let principals = served
            .iter_mut()
            .filter(|(u, _)| u.as_str() == user)
            .map(|(_, e)| &mut e.principal)
            .chain(
                puts.iter_mut()
                    .filter(|(u, _)| u.as_str() == user)
                    .map(|(_, e)| &mut e.principal),
            );
        for principal in principals {
            if *principal != erased {
                *principal = erased.clone();
                scrubbed += 1;
            }
        }
        Ok(scrubbed)
    }

    async fn record_wipes(
        &mut self,
        _ranges: &std::collections::BTreeMap<String, Vec<(u64, u32)>>,
        _at: Timestamp,
    ) -> Result<(), StorageError> {
        // Chunks live in the state itself: deleting one forgets its bytes, and no object keeps
        // any to wipe.
        Ok(())
    }
}
