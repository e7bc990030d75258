//! The install itself, once a download is verified in its temporary file: opened, migrated and
//! healed, the local credentials carried in, and the destination replaced atomically and bound to
//! the revision.

use super::*;

/// A verified download waiting in its temporary file. Single use.
pub struct Downloaded {
    pub(super) prepared: Prepared,
    pub(super) temp: TempSibling,
}

impl std::fmt::Debug for Downloaded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Downloaded")
            .field("prepared", &self.prepared)
            .field("temp", &self.temp.path())
            .finish()
    }
}

/// What an install did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Installed {
    /// The file installed.
    pub destination: PathBuf,
    /// The revision it came from.
    pub revision: String,
    /// The revision's SHA-256 (hex), as recorded by the origin and verified.
    pub sha256: String,
    /// Bytes downloaded.
    pub downloaded: u64,
    /// Bytes of the installed file.
    pub length: u64,
    /// The revision's storage version as found in its header.
    pub found_version: i64,
    /// Whether the migration ladder ran (the revision was older than this build).
    pub migrated: bool,
    /// The push gate's hash of the installed file, recorded in its record at the origin.
    pub content_hash: String,
    /// Local credentials carried into the installed file.
    pub secrets_kept: usize,
    /// Whether local changes that were never pushed were replaced (`force`).
    pub replaced_local_changes: bool,
    /// Whether there was no local copy (a new device).
    pub bootstrapped: bool,
    /// The push-state sidecar written.
    pub sidecar: PathBuf,
    /// Whether the installed file is protected (SNUGENC1): resealed in the destination's own
    /// container when that was protected ([`prepare_unlocking`]), otherwise in the revision's
    /// when the revision was protected; header and slots unchanged, a fresh payload IV (§11.3).
    pub protected: bool,
    /// Whether the installed file was resealed in the destination's container (it was protected
    /// before the pull, so the secrets that opened it still do).
    pub kept_destination_container: bool,
    /// Where the replaced file's bytes were kept, when it held changes the origin lacked
    /// (`force`): exactly as they were on disk ([`crate::keep`]).
    pub kept: Option<PathBuf>,
    /// Whether the revision was installed beside a destination with changes of its own
    /// (`Options::keep_both`), at [`Installed::destination`], leaving that file as it was.
    pub beside: bool,
}

impl Downloaded {
    /// The revision downloaded.
    pub fn snapshot(&self) -> &SnapshotInfo {
        &self.prepared.snapshot
    }

    /// The temporary file holding the download (removed when this value is dropped).
    pub fn temp_path(&self) -> &Path {
        self.temp.path()
    }

    /// Installs the download: checks its header's storage version, opens it defensively
    /// (`quick_check`, hostile-schema refusal, migrate and heal, as a pull from the user's own
    /// origin: grants reconciled against the local copy, endpoint re-confirmation re-armed),
    /// carries the local secrets in, re-checks that the destination and its sidecar are exactly
    /// as prepared, replaces the destination atomically and binds it to the revision in the
    /// sidecar.
    ///
    /// The sidecar is renamed into place after the file: a crash between the two leaves the
    /// new file under the old push state, which reads as a local change (a refusal on the next
    /// sync), never the old file under the new state, which a push would send over the origin.
    ///
    /// A protected revision needs [`Downloaded::install_unlocking`]; here it is refused as locked.
    pub fn install(self) -> Result<Installed, RestoreError> {
        self.install_unlocking(None, &snug_container::Limits::default())
    }

    /// Whether the download is a protected (SNUGENC1) file, which only
    /// [`Downloaded::install_unlocking`] with a secret installs. Reads its leading bytes.
    pub fn is_protected(&self) -> Result<bool, RestoreError> {
        let mut leading = Vec::with_capacity(snug_container::MAGIC.len());
        File::open(self.temp.path())
            .and_then(|file| {
                file.take(snug_container::MAGIC.len() as u64)
                    .read_to_end(&mut leading)
            })
            .map_err(io_error("read", self.temp.path()))?;
        Ok(snug_schema::detect_format(&leading) == FileFormat::Protected)
    }

    /// Installs like [`Downloaded::install`], opening a protected revision with `secrets`
    /// (within `limits`) and keeping it protected: the installed file is the revision's own
    /// container resealed over the installed database (`snug_container::reseal`: header, slots
    /// and wrapped keys unchanged, a fresh payload IV), so it opens with every secret that opened
    /// the origin's copy and never lands on disk in plaintext. A plain revision ignores `secrets`.
    pub fn install_unlocking(
        self,
        secrets: Option<&snug_container::Secrets>,
        limits: &snug_container::Limits,
    ) -> Result<Installed, RestoreError> {
        let Downloaded { prepared, temp } = self;
        let revision = prepared.snapshot.revision.clone();
        let clock = prepared.clock.clone();
        let bytes = fs::read(temp.path()).map_err(io_error("read", temp.path()))?;
        let (bytes, sealed) = match snug_schema::detect_format(&bytes) {
            FileFormat::Protected => {
                let container_error = |source| RestoreError::Container {
                    revision: revision.clone(),
                    source,
                };
                let secrets = secrets.ok_or(container_error(snug_container::OpenError::Locked))?;
                let (unlocked, seal) =
                    Resealable::open(bytes, secrets, limits).map_err(container_error)?;
                (Zeroizing::new(unlocked.plaintext), Some(seal))
            }
            FileFormat::Sqlite | FileFormat::Unknown => (Zeroizing::new(bytes), None),
        };
        if let Some(found) = header_storage_version(&bytes)
            && found > STORAGE_VERSION
        {
            return Err(RestoreError::SchemaTooNew {
                revision,
                found,
                supported: STORAGE_VERSION,
            });
        }
        let local_db = prepared.local.as_ref().map(|local| &local.db);
        let options = ImportOptions {
            secrets: None,
            trusted_origin: true,
            container_limits: snug_container::Limits::default(),
        };
        let (mut merged, report) = snug_schema::import(&bytes, local_db, &options, clock.clone())
            .map_err(|source| RestoreError::Refused {
            revision: revision.clone(),
            source,
        })?;
        drop(bytes);
        let secrets_kept = carry_secrets(local_db, &mut merged)?;
        let image = merged.to_bytes().map_err(RestoreError::Storage)?;
        drop(merged);
        if image.len() as u64 > MAX_USERDB_BYTES {
            return Err(RestoreError::TooLarge {
                revision,
                size: image.len() as u64,
                max: MAX_USERDB_BYTES,
            });
        }
        let content_hash = gate::content_hash(&image, clock.clone())?;
        // The destination's own container outranks the revision's: the file on this device keeps
        // opening with what opened it before the pull.
        let local_seal = prepared
            .local
            .as_ref()
            .and_then(|local| local.seal.as_ref());
        let kept_destination_container = local_seal.is_some();
        let image = match local_seal.or(sealed.as_ref()) {
            Some(seal) => seal.reseal(image, limits).map_err(RestoreError::Reseal)?,
            None => image,
        };
        rewrite(temp.path(), &image)?;

        let sidecar_path = sidecar_location(&prepared.destination)
            .ok_or_else(|| RestoreError::LegacyBackup {
                path: prepared.destination.clone(),
            })?
            .write;
        let mut state = prepared.state.clone();
        state.record(
            &prepared.origin.0,
            OriginState {
                address: prepared.origin.1.clone(),
                revision: revision.clone(),
                sha256: prepared.snapshot.sha256_hex(),
                content_hash: content_hash.clone(),
                synced_at: clock.timestamp(),
            },
        );
        let sidecar_temp = TempSibling::create(&sidecar_path)
            .map_err(io_error("create a temporary file beside", &sidecar_path))?;
        rewrite(sidecar_temp.path(), &state.encode())?;

        prepared.check_unchanged()?;
        let kept = if prepared.replaces_local_changes {
            Some(prepared.keep_local()?)
        } else {
            None
        };
        prepared.replace(temp)?;
        let unbound = |source| RestoreError::Unbound {
            path: sidecar_path.clone(),
            source,
        };
        sync_parent_dir(&prepared.destination).map_err(unbound)?;
        fs::rename(sidecar_temp.path(), &sidecar_path).map_err(unbound)?;
        sidecar_temp.disarm();
        sync_parent_dir(&sidecar_path).map_err(unbound)?;

        Ok(Installed {
            destination: prepared.destination.clone(),
            sha256: prepared.snapshot.sha256_hex(),
            downloaded: prepared.snapshot.size,
            revision,
            length: image.len() as u64,
            found_version: report.found_version,
            migrated: report.advanced,
            content_hash,
            secrets_kept,
            replaced_local_changes: prepared.replaces_local_changes,
            bootstrapped: prepared.local.is_none(),
            sidecar: sidecar_path,
            protected: sealed.is_some() || kept_destination_container,
            kept_destination_container,
            kept,
            beside: prepared.beside.is_some(),
        })
    }
}

/// Puts every local credential into `merged`; local wins over anything the origin's copy holds
/// (a hub's copy holds none; a personal origin's may).
fn carry_secrets(local: Option<&UserDb>, merged: &mut UserDb) -> Result<usize, RestoreError> {
    let Some(local) = local else {
        return Ok(0);
    };
    let mut kept = 0;
    for key in local.secret_keys().map_err(RestoreError::Secrets)? {
        if let Some(value) = local.secret(&key).map_err(RestoreError::Secrets)? {
            let value = Zeroizing::new(value);
            merged
                .set_secret(&key, &value)
                .map_err(RestoreError::Secrets)?;
            kept += 1;
        }
    }
    Ok(kept)
}

/// Replaces the contents of a temporary file and makes them durable.
fn rewrite(path: &Path, bytes: &[u8]) -> Result<(), RestoreError> {
    let mut file = File::create(path).map_err(io_error("write", path))?;
    file.write_all(bytes).map_err(io_error("write", path))?;
    file.sync_all().map_err(io_error("write", path))
}
