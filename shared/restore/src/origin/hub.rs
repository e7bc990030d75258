//! The hub origin: a Snug hub's `/userdb` over HTTP (spec §9.3), blocking, through `ureq` with
//! rustls (behind this crate's default `hub` feature; without it the crate opens no sockets).
//!
//! `describe` is a `HEAD /userdb` (or `HEAD /userdb/revisions/{rev}` for a retained revision): the
//! revision is the strong ETag, with `Content-Length`, `Repr-Digest: sha-256=:…:` and, from hubs
//! that record it, `Snug-Storage-Version`. `download` reads the immutable
//! `GET /userdb/revisions/{rev}`, so the bytes are the revision described even if the hub moves
//! meanwhile; a hub without that route (or one that reclaimed the revision) falls back to
//! `GET /userdb`, accepted only while its ETag is still the revision (else `ORIGIN_MOVED`).
//! `push` is a `PUT /userdb` with revision compare-and-swap: `If-Match: "<base>"`, or
//! `If-None-Match: *` for a first push; a 409 or 412 is a [`Pushed::Conflict`] naming the hub's
//! current revision. What is pushed to a hub is always the secrets-stripped plain export, never a
//! container (§11.3): a hub is not a personal origin.
//!
//! Delta sync (issue 21): given the base's manifest, `push_from` makes the layout itself,
//! patching the pages whose shape the base holds, and sends only the pages the hub lacks,
//! `PUT /userdb/delta` under the same `If-Match`. Without it, a push first learns the base's
//! pages: it sends a summary of the new image (every group of 64 pages by one hash,
//! `snug_delta::Sparse`) to `POST /userdb/revisions/{base}/plan`, and the hub answers the base's
//! manifest with the groups that match named by their hash (issue 38: kilobytes, where a whole
//! manifest is eight bytes a page). A pull names the revision its copy is
//! (`POST /userdb/delta?base=<rev>`, no body, `Snug-Delta-Patches: 1`) when the copy is one the
//! hub keeps; otherwise it learns the wanted revision's pages the same way and sends its copy's
//! manifest sparse against them (`?base=<wanted>`). A hub that does not take summaries (it
//! refuses one as `DELTA_INVALID`) is sent whole manifests instead. It rebuilds the revision
//! from the delta, checked against the revision's SHA-256. A hub
//! without those routes (404, 405), a base it no longer keeps (`DELTA_BASE_GONE`) or any other
//! `DELTA_*` refusal falls back to the whole file, as does a delta that does not rebuild the
//! revision. Delta bodies travel zstd-compressed (issue 38): every delta request says
//! `Accept-Encoding: zstd`, and a delta push is sent `Content-Encoding: zstd` until the hub
//! refuses the coding (a 415, or `DELTA_INVALID` from a hub older than it), then as it is.
//! [`Origin::traffic`] counts the body bytes as sent, either way.
//!
//! Who the origin is: a Snug hub states the caller's origin identity in a `Snug-Origin` header on
//! every answer about the image (its store and the authenticated user, issue 35), kept from the
//! last such answer; a hub that states none (the reference implementation's) is known by its
//! URL.
//!
//! A request with a body asks `Expect: 100-continue`, so a hub that refuses it from its headers
//! (a 401, a 412, a 429) answers before a byte of the body is sent, and the refusal reaches the
//! client as an answer rather than as a connection the hub closed mid-upload.
//!
//! A 429 is waited out for its `Retry-After` (each wait at most 10 s, 30 s in all by default) and
//! the request sent again, any request alike: a 429 means the hub did nothing. Any other answer
//! is an [`OriginError`]: 401/403 `SYNC_AUTH` (saying whether a token was sent and refused, or
//! none was), a transport failure `SYNC_NETWORK` (a TLS handshake against a plain-HTTP server
//! named as such), and otherwise the hub's own JSON `code` where the registry knows it (so a
//! client speaks one vocabulary with the hub), else `SYNC_HTTP`.

use std::{
    io::{Read as _, Write},
    sync::{
        Mutex,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::Duration,
};

use base64::Engine as _;

use snug_delta::{Delta, Layout, Limits, Manifest, Sparse};

/// The request header by which a pull says it rebuilds patched pages (a delta's third run
/// kind; value 1) and compressed pages too (its fourth; value 2), so a hub may send them; a hub
/// without delta patches ignores it.
pub(crate) const PATCHES_HEADER: &str = "snug-delta-patches";

use super::{
    AddressKind, DOWNLOAD_BUFFER, LocalCopy, Origin, OriginError, OriginId, Pushed, Selector,
    SnapshotInfo, SyncedBase, Traffic, delta_page_size,
};

/// A hub origin over HTTP: `<base>/userdb` with an optional bearer token.
#[derive(Debug)]
pub struct HubOrigin {
    /// `<base>/userdb`.
    url: String,
    token: Option<String>,
    agent: ureq::Agent,
    /// Whether to try delta push and pull before the whole file.
    delta: bool,
    sent: AtomicU64,
    received: AtomicU64,
    went_delta: AtomicBool,
    /// Whether a delta push goes zstd-compressed: until the hub refuses the coding.
    zstd_push: AtomicBool,
    /// Who the hub is, from its last answer about the user's image.
    identity: Mutex<Option<OriginId>>,
    /// How long to wait for a hub that answers 429, in all, before giving up.
    rate_limit_patience: Duration,
}

/// Pages per group of a summary: a 64 MiB database of 4 KiB pages is summarized in 2.3 KiB, and
/// a group that differs costs 1 KiB of ids and shapes.
const SUMMARY_GROUP: u32 = 64;

/// What a summary taught about a revision's pages.
enum Learnt {
    /// The revision's whole manifest.
    Pages(Manifest),
    /// Nothing: the hub takes no summaries, or answered one wrongly; a whole manifest goes.
    NoSummaries,
    /// The hub cannot go by difference now (a route or base it lacks): the whole file goes.
    WholeFile,
}

/// The content coding of delta bodies both ways (issue 38): literal pages travel compressed.
const ZSTD: &str = "zstd";
/// zstd's default level, which keeps the window within RFC 9659's 8 MiB.
const ZSTD_LEVEL: i32 = 3;
/// The largest window a hub's `zstd` answer may use: 2^23 = 8 MiB (RFC 9659 §3).
const ZSTD_WINDOW_LOG_MAX: u32 = 23;

/// The header in which a Snug hub states the caller's origin identity (issue 35).
pub(crate) const ORIGIN_HEADER: &str = "snug-origin";

/// The longest single wait a `Retry-After` is honoured for; a hub asking for more is waited on
/// this long and asked again, within [`HubOrigin`]'s patience.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(10);

/// The hub's JSON error `code` as the registry's word: the reason of that name, else the reason
/// whose HTTP answer carries that code (the gateway says `OVERLOADED` for its own shedding too).
/// One vocabulary with the hub, without a list kept by hand.
fn hub_code(code: &str) -> Option<&'static snug_reasons::Reason> {
    if code.is_empty() {
        return None;
    }
    snug_reasons::find(code).or_else(|| {
        snug_reasons::ALL
            .iter()
            .copied()
            .find(|reason| reason.http.is_some_and(|http| http.code == code))
    })
}

/// Characters a path segment keeps as they are (RFC 3986 unreserved); everything else in a
/// revision token is percent-encoded.
fn path_segment(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

type Response = ureq::http::Response<ureq::Body>;

impl HubOrigin {
    /// Returns the origin of the hub at `origin` (its base URL, or its `/userdb` URL), sending
    /// `token` as a bearer token when there is one. Nothing is sent until the first call.
    pub fn new(origin: &str, token: Option<String>) -> Self {
        let base = origin.trim_end_matches('/');
        let url = if base.ends_with("/userdb") {
            base.to_owned()
        } else {
            format!("{base}/userdb")
        };
        let agent: ureq::Agent = ureq::Agent::config_builder()
            // Every status is an answer to interpret here, not an error.
            .http_status_as_error(false)
            .timeout_connect(Some(Duration::from_secs(10)))
            .timeout_global(Some(Duration::from_secs(300)))
            .build()
            .into();
        Self {
            url,
            token,
            agent,
            delta: true,
            sent: AtomicU64::new(0),
            received: AtomicU64::new(0),
            went_delta: AtomicBool::new(false),
            zstd_push: AtomicBool::new(true),
            identity: Mutex::new(None),
            rate_limit_patience: Duration::from_secs(30),
        }
    }

    /// Returns this origin waiting at most `patience` in all for a hub that answers 429 (30 s
    /// by default).
    pub fn rate_limit_patience(mut self, patience: Duration) -> Self {
        self.rate_limit_patience = patience;
        self
    }

    /// Sends one request (`send` makes and sends it, and may be called again): a 429 is waited
    /// out for its `Retry-After` (at most [`MAX_RETRY_AFTER`] each time) and the request sent
    /// again, until this origin's patience is spent. A 429 means the hub did nothing, so any
    /// request may be repeated, a write included. A transport failure is
    /// [`OriginError::Unreachable`], with what the client understood of it.
    fn send(
        &self,
        send: impl Fn() -> Result<Response, ureq::Error>,
    ) -> Result<Response, OriginError> {
        let mut waited = Duration::ZERO;
        loop {
            let response = send().map_err(|err| self.unreachable(err))?;
            if response.status().as_u16() != 429 {
                return Ok(response);
            }
            let asked = Self::header(&response, "retry-after")
                .and_then(|v| v.parse::<u64>().ok())
                .map_or(Duration::from_secs(1), Duration::from_secs);
            let wait = asked.clamp(Duration::from_millis(100), MAX_RETRY_AFTER);
            if waited + wait > self.rate_limit_patience {
                return Err(self.refused_with_body(response));
            }
            std::thread::sleep(wait);
            waited += wait;
        }
    }

    /// Keeps who the hub is from an answer about the user's image: the identity it states, or,
    /// from a hub that states none (the reference implementation), its URL. An answer that is
    /// not about the image (a refusal of the credentials, an overloaded hub) says nothing.
    fn note_identity(&self, response: &Response) {
        if !matches!(response.status().as_u16(), 200 | 204 | 304 | 404 | 412) {
            return;
        }
        let identity = Self::header(response, ORIGIN_HEADER)
            .and_then(OriginId::hub)
            .unwrap_or_else(|| OriginId::address(AddressKind::Url, &self.url));
        *self.identity.lock().unwrap_or_else(|p| p.into_inner()) = Some(identity);
    }

    /// Returns this origin moving whole files only, as a hub without delta routes would make
    /// it (for comparisons and for hubs that misbehave).
    pub fn whole_files_only(mut self) -> Self {
        self.delta = false;
        self
    }

    fn count_sent(&self, n: usize) {
        self.sent.fetch_add(n as u64, Ordering::Relaxed);
    }

    fn count_received(&self, n: usize) {
        self.received.fetch_add(n as u64, Ordering::Relaxed);
    }

    /// Reads a body of at most `limit` bytes, counting it.
    fn read_body(&self, response: &mut Response, limit: u64) -> Result<Vec<u8>, OriginError> {
        let body = response
            .body_mut()
            .with_config()
            .limit(limit)
            .read_to_vec()
            .map_err(|err| OriginError::Interrupted {
                detail: err.to_string(),
            })?;
        self.count_received(body.len());
        Ok(body)
    }

    /// Reads a delta route's answer of at most `limit` bytes once decoded: the body as sent is
    /// counted, and decoded when the hub sent it `zstd` (a window over RFC 9659's 8 MiB, a frame
    /// cut off, or more than `limit` bytes is an answer that does not decode).
    fn read_delta_body(&self, response: &mut Response, limit: u64) -> Result<Vec<u8>, OriginError> {
        let coded = match Self::header(response, "content-encoding").map(str::trim) {
            None | Some("identity") => false,
            Some(coding) if coding.eq_ignore_ascii_case(ZSTD) => true,
            Some(other) => {
                return Err(OriginError::BadResponse {
                    detail: format!("a delta answer in Content-Encoding {other}, not asked for"),
                });
            }
        };
        // zstd's worst case for incompressible input is a few bytes per 128 KiB block.
        let sent = if coded {
            limit + limit / 64 + 1024
        } else {
            limit
        };
        let body = self.read_body(response, sent)?;
        if !coded {
            return Ok(body);
        }
        let undecodable = |detail: String| OriginError::BadResponse {
            detail: format!("a zstd delta answer that does not decode: {detail}"),
        };
        let mut decoder =
            zstd::stream::read::Decoder::new(&body[..]).map_err(|e| undecodable(e.to_string()))?;
        decoder
            .window_log_max(ZSTD_WINDOW_LOG_MAX)
            .map_err(|e| undecodable(e.to_string()))?;
        let mut decoded = Vec::new();
        (&mut decoder)
            .take(limit + 1)
            .read_to_end(&mut decoded)
            .map_err(|e| undecodable(e.to_string()))?;
        if decoded.len() as u64 > limit {
            return Err(undecodable(format!("more than {limit} bytes")));
        }
        Ok(decoded)
    }

    /// The JSON `code` of an error answer (its body read and counted), and the body.
    fn error_code(&self, response: &mut Response) -> (String, String) {
        let body = self
            .read_body(response, 64 * 1024)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default();
        let code = serde_json::from_str::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v["code"].as_str().map(str::to_owned))
            .unwrap_or_default();
        (code, body)
    }

    /// A push by difference from `base`; `None` when the hub cannot take one (no delta routes,
    /// the base reclaimed, a `DELTA_*` refusal), so the caller sends the whole file. The base's
    /// pages are learnt from a summary of the new image's (a few KiB) and the layout made here;
    /// a hub that does not take a summary is sent the new image's whole manifest to plan.
    fn push_delta(&self, bytes: &[u8], base: &str) -> Result<Option<Pushed>, OriginError> {
        let page_size = delta_page_size(bytes);
        let Ok(mine) = Manifest::with_shapes(bytes, page_size) else {
            return Ok(None);
        };
        // A base far larger than the new image is not worth learning page by page.
        let base_limits = Limits {
            max_length: (bytes.len() as u64).saturating_mul(2) + (64 << 20),
        };
        match self.learn_pages(base, &mine, &base_limits)? {
            Learnt::Pages(base_pages) => {
                let layout = snug_delta::plan(&mine, &base_pages.source());
                return self.send_delta(bytes, base, layout, None);
            }
            Learnt::WholeFile => return Ok(None),
            Learnt::NoSummaries => {}
        }
        let manifest = Manifest {
            shapes: None,
            ..mine
        };
        let url = format!("{}/plan", self.revision_url(base));
        let Ok(mut response) = self.post_delta(&url, &manifest.encode(), Rebuilds::Plain)? else {
            return Ok(None);
        };
        let limits = Limits {
            max_length: bytes.len() as u64,
        };
        let layout = self.read_delta_body(&mut response, limits.max_layout_len())?;
        let layout =
            Layout::parse_plan(&layout, &limits).map_err(|err| OriginError::BadResponse {
                detail: format!("a delta plan that does not parse: {err}"),
            })?;
        self.send_delta(bytes, base, layout, None)
    }

    /// The whole manifest of `revision`, learnt by sending a summary of `mine` (every group of
    /// pages by one hash) to its plan route: the hub answers the revision's manifest sparse
    /// against it, and the groups it names by hash are `mine`'s. A hub older than summaries
    /// refuses one as a malformed manifest.
    fn learn_pages(
        &self,
        revision: &str,
        mine: &Manifest,
        limits: &Limits,
    ) -> Result<Learnt, OriginError> {
        let url = format!("{}/plan", self.revision_url(revision));
        let summary = Sparse::summary(mine, SUMMARY_GROUP).encode();
        let mut response = match self.post_delta(&url, &summary, Rebuilds::Plain)? {
            Ok(response) => response,
            Err(code) if snug_reasons::sync::DELTA_INVALID == *code => {
                return Ok(Learnt::NoSummaries);
            }
            Err(_) => return Ok(Learnt::WholeFile),
        };
        let answer = self.read_delta_body(&mut response, limits.max_manifest_len())?;
        // An answer that is not the revision's pages against this summary is the hub's fault,
        // not the file's: the whole manifest goes instead.
        Ok(Sparse::parse(&answer, limits)
            .and_then(|theirs| theirs.expand(mine))
            .map_or(Learnt::NoSummaries, Learnt::Pages))
    }

    /// POSTs `body` (a manifest or a summary) to the delta route `url`, saying what this client
    /// rebuilds beyond copied and literal pages: the 200 answer, or, where [`delta_answer`] says
    /// the whole file goes instead, the hub's code; any other refusal is the origin's error.
    fn post_delta(
        &self,
        url: &str,
        body: &[u8],
        patches: Rebuilds,
    ) -> Result<Result<Response, String>, OriginError> {
        self.count_sent(body.len());
        let mut response = self.send(|| {
            let request = self
                .authorize(self.agent.post(url))
                .header("content-type", "application/octet-stream")
                .header("accept-encoding", ZSTD)
                .header("expect", "100-continue");
            match patches {
                Rebuilds::Patched => request.header(PATCHES_HEADER, "1").send(body),
                Rebuilds::Compressed => request.header(PATCHES_HEADER, "2").send(body),
                Rebuilds::Plain => request.send(body),
            }
        })?;
        let status = response.status().as_u16();
        if status == 200 {
            return Ok(Ok(response));
        }
        let (code, text) = self.error_code(&mut response);
        match delta_answer(status, &code) {
            DeltaAnswer::WholeFile => Ok(Err(code)),
            _ => Err(self.refused(status, &text)),
        }
    }

    /// Sends the delta `layout` asks for (its literal pages from `bytes`, compressed against
    /// `base_image` where this client holds it) as `PUT /userdb/delta`, zstd-coded unless this
    /// hub refused the coding; `None` on a `DELTA_*` refusal, so the caller falls back.
    fn send_delta(
        &self,
        bytes: &[u8],
        base: &str,
        layout: Layout,
        base_image: Option<&[u8]>,
    ) -> Result<Option<Pushed>, OriginError> {
        let plain = |layout| Delta::build(layout, bytes, None).encode();
        let (mut delta, mut compressed_pages) = match base_image {
            Some(source) => {
                let delta = Delta::build_compressed(layout.clone(), bytes, source);
                let any = delta.layout.compressed_count() > 0;
                (delta.encode(), any.then_some(layout))
            }
            None => (plain(layout), None),
        };
        loop {
            let compressed = self
                .zstd_push
                .load(Ordering::Relaxed)
                .then(|| zstd::bulk::compress(&delta, ZSTD_LEVEL).ok())
                .flatten();
            let body = compressed.as_deref().unwrap_or(&delta);
            self.count_sent(body.len());
            let mut response = self.send(|| {
                let request = self
                    .authorize(self.agent.put(format!("{}/delta", self.url)))
                    .header("content-type", "application/octet-stream")
                    .header("expect", "100-continue")
                    .header("if-match", format!("\"{base}\""));
                match compressed {
                    Some(_) => request.header("content-encoding", ZSTD).send(body),
                    None => request.send(body),
                }
            })?;
            let status = response.status().as_u16();
            if matches!(status, 200 | 201 | 204) {
                let _ = self.read_body(&mut response, 64 * 1024);
                let revision = Self::etag(&response).ok_or_else(|| OriginError::BadResponse {
                    detail: "an accepted write without an ETag".to_owned(),
                })?;
                self.went_delta.store(true, Ordering::Relaxed);
                return Ok(Some(Pushed::Accepted { revision }));
            }
            let etag = Self::etag(&response);
            let (code, body) = self.error_code(&mut response);
            // A hub older than compressed pages refuses the run kind: the pages go as they are
            // (first, so such a hub keeps the body's coding if it takes that).
            if snug_reasons::sync::DELTA_INVALID == *code
                && let Some(layout) = compressed_pages.take()
            {
                delta = plain(layout);
                continue;
            }
            // A hub that does not take the coding (a 415, or a hub older than it, which reads
            // the compressed bytes as a delta) is sent the delta as it is, once.
            if compressed.is_some() && (status == 415 || snug_reasons::sync::DELTA_INVALID == *code)
            {
                self.zstd_push.store(false, Ordering::Relaxed);
                continue;
            }
            return match delta_answer(status, &code) {
                DeltaAnswer::Conflict => Ok(Some(Pushed::Conflict {
                    current: current_revision(etag, &body),
                })),
                DeltaAnswer::WholeFile => Ok(None),
                DeltaAnswer::Taken | DeltaAnswer::Refused => Err(self.refused(status, &body)),
            };
        }
    }

    /// The current revision rebuilt from `local` by a delta pull; `None` when the hub cannot
    /// send one, has moved past `snapshot`, or the delta does not rebuild it, so the caller
    /// downloads the whole file.
    fn pull_delta(
        &self,
        snapshot: &SnapshotInfo,
        local: LocalCopy<'_>,
    ) -> Result<Option<Vec<u8>>, OriginError> {
        let mine = Manifest::with_shapes(local.bytes, delta_page_size(local.bytes)).ok();
        // The revision the device last synced, whose pages it recorded: a file whose pages are
        // those needs no manifest (the hub's copy stands for it), any other is named sparse
        // against them, the groups that differ in full. Without them, a file unchanged since
        // that sync is taken to be the revision, and the rebuilt image's check says if not.
        // Pages compressed against the hub's copy only where the file is that copy: every page,
        // or those its sparse manifest names as the revision's.
        let (base, body, rebuilds) = match (local.synced, &mine) {
            (Some((revision, pages)), Some(mine)) if mine.ids != pages.ids => (
                Some(revision),
                Sparse::against(mine, &Sparse::summary(pages, SUMMARY_GROUP)).encode(),
                Rebuilds::Compressed,
            ),
            (Some((revision, _)), Some(_)) => (Some(revision), Vec::new(), Rebuilds::Compressed),
            _ => (local.revision, Vec::new(), Rebuilds::Patched),
        };
        if let Some(base) = base
            && let Some(image) = self.fetch_delta(
                &self.delta_url(base),
                &body,
                rebuilds,
                snapshot,
                local.bytes,
            )?
        {
            return Ok(Some(image));
        }
        let Some(mine) = mine else {
            return Ok(None);
        };
        self.pull_delta_learning(snapshot, local.bytes, mine)
    }

    /// A delta pull that learns the wanted revision's pages from a summary and names `local`
    /// sparse against them (a few KiB each way), or at last sends `local`'s whole manifest (its
    /// `mine`) to a hub that does not take summaries.
    fn pull_delta_learning(
        &self,
        snapshot: &SnapshotInfo,
        local: &[u8],
        mine: Manifest,
    ) -> Result<Option<Vec<u8>>, OriginError> {
        let limits = Limits {
            max_length: snapshot.size.max(1),
        };
        match self.learn_pages(&snapshot.revision, &mine, &limits)? {
            Learnt::Pages(theirs) => {
                let sparse = Sparse::against(&mine, &Sparse::summary(&theirs, SUMMARY_GROUP));
                let url = self.delta_url(&snapshot.revision);
                let body = sparse.encode();
                if let Some(image) =
                    self.fetch_delta(&url, &body, Rebuilds::Patched, snapshot, local)?
                {
                    return Ok(Some(image));
                }
            }
            Learnt::WholeFile => return Ok(None),
            Learnt::NoSummaries => {}
        }
        let manifest = Manifest {
            shapes: None,
            ..mine
        };
        let url = format!("{}/delta", self.url);
        self.fetch_delta(&url, &manifest.encode(), Rebuilds::Patched, snapshot, local)
    }

    /// The pull route naming `base` as what the client's file is (or is sparse against).
    fn delta_url(&self, base: &str) -> String {
        format!("{}/delta?base={}", self.url, path_segment(base))
    }

    /// POSTs `body` to the pull route `url` and rebuilds the revision `snapshot` from `local`
    /// with the delta answered: `None` when the hub cannot send one, has moved past `snapshot`,
    /// or the delta does not rebuild it.
    fn fetch_delta(
        &self,
        url: &str,
        body: &[u8],
        rebuilds: Rebuilds,
        snapshot: &SnapshotInfo,
        local: &[u8],
    ) -> Result<Option<Vec<u8>>, OriginError> {
        // A hub that does not know the header ignores it.
        let Ok(mut response) = self.post_delta(url, body, rebuilds)? else {
            return Ok(None);
        };
        if Self::etag(&response).as_deref() != Some(snapshot.revision.as_str()) {
            let _ = self.error_code(&mut response);
            return Ok(None);
        }
        let limits = Limits {
            max_length: snapshot.size.max(1),
        };
        let body = self.read_delta_body(&mut response, limits.max_delta_len())?;
        let image = Delta::parse(&body, &limits, local.len() as u64)
            .and_then(|delta| delta.assemble(local))
            .ok()
            .filter(|image| {
                image.len() as u64 == snapshot.size && snug_delta::sha256(image) == snapshot.sha256
            });
        if image.is_some() {
            self.went_delta.store(true, Ordering::Relaxed);
        }
        Ok(image)
    }

    /// The hub's current revision as a refused write names it: the `ETag`, or the JSON
    /// `revision` (the body read and counted); `None` when it holds no image.
    fn conflict_revision(&self, response: &mut Response) -> Option<String> {
        let etag = Self::etag(response);
        let (_, body) = self.error_code(response);
        current_revision(etag, &body)
    }

    fn noted_identity(&self) -> Option<OriginId> {
        self.identity
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The immutable address of one revision.
    fn revision_url(&self, revision: &str) -> String {
        format!("{}/revisions/{}", self.url, path_segment(revision))
    }

    fn authorize<B>(&self, request: ureq::RequestBuilder<B>) -> ureq::RequestBuilder<B> {
        match &self.token {
            Some(token) => request.header("authorization", format!("Bearer {token}")),
            None => request,
        }
    }

    /// A transport failure, said in terms of what the client asked for: a TLS handshake that
    /// fails against a plain-HTTP server names the likely fix, not the TLS record type.
    fn unreachable(&self, err: ureq::Error) -> OriginError {
        let tls = matches!(err, ureq::Error::Rustls(_) | ureq::Error::Tls(_))
            || err.to_string().contains("InvalidContentType");
        let detail = if tls && self.url.starts_with("https://") {
            format!(
                "the TLS handshake with {} failed ({err}); if the hub serves plain HTTP there, \
                 use http:// instead",
                self.url
            )
        } else {
            format!("{}: {err}", self.url)
        };
        OriginError::Unreachable { detail }
    }

    /// Turns an unexpected answer into an origin error, keeping the hub's code where the
    /// registry knows it.
    fn refused(&self, status: u16, body: &str) -> OriginError {
        let parsed: Option<serde_json::Value> = serde_json::from_str(body).ok();
        let message = parsed
            .as_ref()
            .and_then(|v| v["message"].as_str())
            .unwrap_or(body)
            .trim();
        let said = if message.is_empty() {
            let phrase = ureq::http::StatusCode::from_u16(status)
                .ok()
                .and_then(|s| s.canonical_reason())
                .unwrap_or("");
            format!("{status} {phrase}").trim().to_owned()
        } else {
            format!("{status}: {message}")
        };
        if status == 401 || status == 403 {
            return OriginError::Unauthorized {
                detail: format!("it answered {said}"),
                token_sent: self.token.is_some(),
            };
        }
        if status == 429 {
            return OriginError::RateLimited {
                detail: format!("it answered {said}"),
            };
        }
        let reason = parsed
            .as_ref()
            .and_then(|v| v["code"].as_str())
            .and_then(hub_code)
            .unwrap_or(&snug_reasons::restore::SYNC_HTTP);
        OriginError::Other {
            reason,
            status,
            detail: format!("{} answered {said}", self.url),
        }
    }

    fn refused_with_body(&self, mut response: Response) -> OriginError {
        let status = response.status().as_u16();
        let body = response
            .body_mut()
            .with_config()
            .limit(64 * 1024)
            .read_to_string()
            .unwrap_or_default();
        self.count_received(body.len());
        self.refused(status, &body)
    }

    fn etag(response: &Response) -> Option<String> {
        let value = response.headers().get("etag")?.to_str().ok()?.trim();
        let value = value.strip_prefix("W/").unwrap_or(value);
        Some(value.trim_matches('"').to_owned()).filter(|v| !v.is_empty())
    }

    fn header<'r>(response: &'r Response, name: &str) -> Option<&'r str> {
        response.headers().get(name)?.to_str().ok().map(str::trim)
    }

    /// The SHA-256 from `Repr-Digest: sha-256=:<base64>:`.
    fn digest(response: &Response) -> Option<[u8; 32]> {
        let value = Self::header(response, "repr-digest")?;
        let encoded = value
            .split(',')
            .map(str::trim)
            .find_map(|item| item.strip_prefix("sha-256=:"))?
            .strip_suffix(':')?;
        base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .ok()?
            .try_into()
            .ok()
    }

    /// Reads a revision's metadata from the headers of a `HEAD`: the ETag, `Content-Length`,
    /// `Repr-Digest` and (from hubs that record it) `Snug-Storage-Version`.
    fn snapshot(response: &Response) -> Result<SnapshotInfo, OriginError> {
        let bad = |detail: &str| OriginError::BadResponse {
            detail: detail.to_owned(),
        };
        let revision = Self::etag(response).ok_or_else(|| bad("an answer without an ETag"))?;
        let size = Self::header(response, "content-length")
            .and_then(|v| v.parse::<u64>().ok())
            .ok_or_else(|| bad("an answer without a Content-Length"))?;
        let sha256 =
            Self::digest(response).ok_or_else(|| bad("an answer without a sha-256 Repr-Digest"))?;
        let storage_version = match Self::header(response, "snug-storage-version") {
            None => None,
            Some(value) => Some(
                value
                    .parse::<u32>()
                    .map_err(|_| bad("a Snug-Storage-Version that is not a number"))?,
            ),
        };
        Ok(SnapshotInfo {
            revision,
            sha256,
            size,
            storage_version,
        })
    }
}

/// What a hub's event stream (`GET /userdb/events`) says of the user's current revision.
#[derive(Debug, PartialEq, Eq)]
enum Heard {
    /// It is now this revision.
    Revision(String),
    /// There is none.
    NoImage,
    /// It may have changed (a gap in what the stream lists).
    Gap,
    /// The hub ended the stream (its lifetime, a restart): nothing is known.
    Ended,
}

/// The next event of an event stream, skipping heartbeats and hints; `None` at its end.
fn next_event(lines: &mut impl std::io::BufRead) -> std::io::Result<Option<Heard>> {
    let (mut kind, mut id) = (String::new(), None::<String>);
    let mut line = String::new();
    loop {
        line.clear();
        if lines.read_line(&mut line)? == 0 {
            return Ok(None);
        }
        let line = line.trim_end_matches(['\r', '\n']);
        if line.is_empty() {
            let heard = match kind.as_str() {
                "revision" => id
                    .take()
                    .map(|id| Heard::Revision(id.trim_matches('"').to_owned())),
                "no-image" => Some(Heard::NoImage),
                "gap" => Some(Heard::Gap),
                "error" => Some(Heard::Ended),
                _ => None,
            };
            if heard.is_some() {
                return Ok(heard);
            }
            kind.clear();
            continue;
        }
        match line.split_once(':') {
            Some(("event", value)) => kind = value.trim().to_owned(),
            Some(("id", value)) => id = Some(value.trim().to_owned()),
            _ => {}
        }
    }
}

impl HubOrigin {
    /// [`Origin::wait_for_change`] over the hub's event stream, resuming after `current`; a
    /// hub without one (404) is asked once a second instead.
    fn listen_for_change(
        &self,
        current: Option<&str>,
        within: Duration,
    ) -> Result<bool, OriginError> {
        let url = format!("{}/events", self.url);
        let started = std::time::Instant::now();
        let response = self.send(|| {
            let mut request = self.authorize(self.agent.get(&url));
            if let Some(current) = current {
                request = request.header("last-event-id", format!("\"{current}\""));
            }
            request.config().timeout_global(Some(within)).build().call()
        });
        let response = match response {
            Ok(response) => response,
            Err(OriginError::Unreachable { .. }) if started.elapsed() >= within => {
                return Ok(false);
            }
            Err(err) => return Err(err),
        };
        match response.status().as_u16() {
            200 => {}
            404 => {
                let left = within.saturating_sub(started.elapsed());
                return super::poll_for_change(self, current, left);
            }
            status => {
                let body = response.into_body().read_to_string().unwrap_or_default();
                return Err(self.refused(status, &body));
            }
        }
        let mut lines = std::io::BufReader::new(response.into_body().into_reader());
        loop {
            let heard = match next_event(&mut lines) {
                Ok(Some(heard)) => heard,
                // The hub ended the stream, or `within` passed while it was quiet.
                Ok(None) | Err(_) => return Ok(false),
            };
            match (heard, current) {
                (Heard::Revision(now), Some(current)) if now == current => {}
                (Heard::NoImage, None) => {}
                (Heard::Ended, _) => return Ok(false),
                _ => return Ok(true),
            }
        }
    }
}

impl Origin for HubOrigin {
    fn wait_for_change(
        &self,
        current: Option<&str>,
        within: Duration,
    ) -> Result<bool, OriginError> {
        self.listen_for_change(current, within)
    }

    /// Returns the hub's `/userdb` URL.
    fn name(&self) -> String {
        self.url.clone()
    }

    fn syncs_by_difference(&self) -> bool {
        self.delta
    }

    fn describe(&self, which: &Selector) -> Result<SnapshotInfo, OriginError> {
        let url = match which {
            Selector::Current => self.url.clone(),
            Selector::Revision(revision) => self.revision_url(revision),
        };
        let response = self.send(|| self.authorize(self.agent.head(&url)).call())?;
        if matches!(which, Selector::Current) {
            self.note_identity(&response);
        }
        match (response.status().as_u16(), which) {
            (200, _) => Self::snapshot(&response),
            (404, Selector::Current) => Err(OriginError::Empty),
            (404, Selector::Revision(revision)) => Err(OriginError::UnknownRevision {
                revision: revision.clone(),
            }),
            // A HEAD answer has no body to read a code from.
            (status, _) => Err(self.refused(status, "")),
        }
    }

    /// The identity the hub states on `HEAD /userdb` (asked now unless an answer this origin
    /// already had said who it is); a hub that states none is known by its URL.
    fn identity(&self) -> Result<OriginId, OriginError> {
        if let Some(identity) = self.noted_identity() {
            return Ok(identity);
        }
        match self.describe(&Selector::Current) {
            Ok(_) | Err(OriginError::Empty) => {}
            Err(err) => return Err(err),
        }
        Ok(self
            .noted_identity()
            .unwrap_or_else(|| OriginId::address(AddressKind::Url, &self.url)))
    }

    // The hub restores in place (`POST /userdb/revisions/{rev}/restore`): no byte travels.
    fn restore(&self, revision: &SnapshotInfo, base: &str) -> Result<Pushed, OriginError> {
        let url = format!("{}/restore", self.revision_url(&revision.revision));
        let mut response = self.send(|| {
            self.authorize(self.agent.post(&url))
                .header("if-match", format!("\"{base}\""))
                .send_empty()
        })?;
        match response.status().as_u16() {
            200 | 201 | 204 => {
                let _ = self.read_body(&mut response, 64 * 1024);
                let revision = Self::etag(&response).ok_or_else(|| OriginError::BadResponse {
                    detail: "an accepted restore without an ETag".to_owned(),
                })?;
                Ok(Pushed::Accepted { revision })
            }
            404 => {
                let _ = self.read_body(&mut response, 64 * 1024);
                Err(OriginError::UnknownRevision {
                    revision: revision.revision.clone(),
                })
            }
            409 | 412 => Ok(Pushed::Conflict {
                current: self.conflict_revision(&mut response),
            }),
            _ => Err(self.refused_with_body(response)),
        }
    }

    // One revision from its immutable address, so the bytes are the revision that was described
    // even if the hub moves meanwhile.
    fn download(&self, snapshot: &SnapshotInfo, sink: &mut dyn Write) -> Result<(), OriginError> {
        let url = self.revision_url(&snapshot.revision);
        let mut response = self.send(|| self.authorize(self.agent.get(&url)).call())?;
        if response.status().as_u16() == 404 {
            // A hub without revision addresses (or one that reclaimed the revision since it was
            // described): the current image is the same bytes only if it is still this revision.
            response = self.send(|| self.authorize(self.agent.get(&self.url)).call())?;
            match (response.status().as_u16(), Self::etag(&response)) {
                (200, Some(current)) if current != snapshot.revision => {
                    return Err(OriginError::Moved {
                        revision: snapshot.revision.clone(),
                        current,
                    });
                }
                (404, _) => {
                    return Err(OriginError::UnknownRevision {
                        revision: snapshot.revision.clone(),
                    });
                }
                _ => {}
            }
        }
        if response.status().as_u16() != 200 {
            return Err(self.refused_with_body(response));
        }
        match Self::etag(&response) {
            Some(etag) if etag == snapshot.revision => {}
            Some(etag) => {
                return Err(OriginError::BadResponse {
                    detail: format!("revision {etag} when asked for {}", snapshot.revision),
                });
            }
            None => {
                return Err(OriginError::BadResponse {
                    detail: "an image without an ETag".to_owned(),
                });
            }
        }
        let mut reader = response.body_mut().as_reader();
        let mut buffer = vec![0u8; DOWNLOAD_BUFFER];
        loop {
            let n = match reader.read(&mut buffer) {
                Ok(0) => return Ok(()),
                Ok(n) => n,
                Err(err) if err.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(err) => {
                    return Err(OriginError::Interrupted {
                        detail: err.to_string(),
                    });
                }
            };
            self.count_received(n);
            sink.write_all(&buffer[..n]).map_err(OriginError::Sink)?;
        }
    }

    fn download_from(
        &self,
        snapshot: &SnapshotInfo,
        local: Option<LocalCopy<'_>>,
        sink: &mut dyn Write,
    ) -> Result<(), OriginError> {
        if let Some(local) = local.filter(|_| self.delta)
            && let Some(image) = self.pull_delta(snapshot, local)?
        {
            return sink.write_all(&image).map_err(OriginError::Sink);
        }
        self.download(snapshot, sink)
    }

    // With the base's page ids known, the plan round is skipped: the layout is made here and
    // only the changed pages travel; any refusal falls back to the planned push, then the whole.
    fn push_from(
        &self,
        bytes: &[u8],
        base: Option<&str>,
        synced: Option<SyncedBase<'_>>,
        pages: Option<&Manifest>,
    ) -> Result<Pushed, OriginError> {
        // Shapes only when the base has them: a hub that cannot patch says so with a DELTA_*
        // refusal, and the plan round after it asks for none.
        let manifest = |base_pages: &Manifest| {
            let shapes = base_pages.shapes.is_some();
            match pages {
                Some(pages) => Ok(Manifest {
                    shapes: pages.shapes.clone().filter(|_| shapes),
                    ..pages.clone()
                }),
                None => Manifest::describe(bytes, delta_page_size(bytes), shapes),
            }
        };
        if let (Some(base), Some(synced)) = (base, synced)
            && self.delta
            && let Ok(manifest) = manifest(synced.pages)
            && let Some(pushed) = self.send_delta(
                bytes,
                base,
                snug_delta::plan(&manifest, &synced.pages.source()),
                synced.image,
            )?
        {
            return Ok(pushed);
        }
        self.push(bytes, base)
    }

    fn traffic(&self) -> Traffic {
        Traffic {
            sent: self.sent.load(Ordering::Relaxed),
            received: self.received.load(Ordering::Relaxed),
            delta: self.went_delta.load(Ordering::Relaxed),
        }
    }

    // A first push (no base) may only create the image; any other names the revision it replaces,
    // and goes by difference where the hub offers it.
    fn push(&self, bytes: &[u8], base: Option<&str>) -> Result<Pushed, OriginError> {
        if let Some(base) = base.filter(|_| self.delta)
            && let Some(pushed) = self.push_delta(bytes, base)?
        {
            return Ok(pushed);
        }
        self.count_sent(bytes.len());
        let mut response = self.send(|| {
            let request = self
                .authorize(self.agent.put(&self.url))
                .header("content-type", "application/octet-stream")
                .header("expect", "100-continue");
            let request = match base {
                Some(base) => request.header("if-match", format!("\"{base}\"")),
                None => request.header("if-none-match", "*"),
            };
            request.send(bytes)
        })?;
        self.note_identity(&response);
        match response.status().as_u16() {
            204 | 200 | 201 => {
                let revision = Self::etag(&response).ok_or_else(|| OriginError::BadResponse {
                    detail: "an accepted write without an ETag".to_owned(),
                })?;
                Ok(Pushed::Accepted { revision })
            }
            409 | 412 => Ok(Pushed::Conflict {
                current: self.conflict_revision(&mut response),
            }),
            _ => Err(self.refused_with_body(response)),
        }
    }
}

/// The hub's current revision as a refused write names it (the one conflict parser): its `ETag`,
/// else the JSON body's `revision`.
fn current_revision(etag: Option<String>, body: &str) -> Option<String> {
    etag.or_else(|| {
        serde_json::from_str::<serde_json::Value>(body)
            .ok()
            .and_then(|v| v["revision"].as_str().map(str::to_owned))
    })
}

/// What a client rebuilds of a delta beyond copied and literal pages, as it tells a hub.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rebuilds {
    /// Nothing more (a push's plan: the layout has neither).
    Plain,
    /// Patched pages.
    Patched,
    /// Patched pages, and pages compressed against the base's pages the file holds.
    Compressed,
}

/// What a client makes of a delta route's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DeltaAnswer {
    /// The route answered what was asked.
    Taken,
    /// The write's precondition failed: the hub holds another revision (the caller's to report).
    Conflict,
    /// Send or fetch the whole file instead.
    WholeFile,
    /// The answer stands: a whole file would meet the same refusal.
    Refused,
}

/// The one rule for a plan, a delta push and a delta pull: a route the hub lacks (404, 405, 501,
/// as a hub without delta sync answers, or a base it no longer keeps) or a refusal of the delta as
/// such (a `DELTA_*` code, `DELTA_BASE_GONE` a 409 among them) falls back to the whole file; a
/// failed precondition (409, 412) is a conflict; credentials, load, quota and every other refusal are the answer, since the whole
/// file would only meet them again, later and dearer.
fn delta_answer(status: u16, code: &str) -> DeltaAnswer {
    match status {
        200..=299 => DeltaAnswer::Taken,
        // Before the status: a base the hub no longer keeps is a 409 `DELTA_BASE_GONE`.
        _ if code.starts_with("DELTA_") => DeltaAnswer::WholeFile,
        409 | 412 => DeltaAnswer::Conflict,
        404 | 405 | 501 => DeltaAnswer::WholeFile,
        _ => DeltaAnswer::Refused,
    }
}

#[cfg(test)]
mod tests;
