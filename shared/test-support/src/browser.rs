//! A headless Chromium for tests that need a real browser's rules (cookies, redirects, CORS),
//! driven over the DevTools protocol, and [`Site`], a tiny HTTP server for the pages it loads.
//!
//! [`Browser::launch`] starts Chromium (`SNUG_TEST_CHROMIUM`, else `chromium`, `chromium-browser`
//! or `google-chrome` on `PATH`) with `--headless=new`, a fresh profile in a temporary directory
//! (also its `HOME` and XDG directories, so nothing of the user's is read or written), no first
//! run, no background networking, component updates, sync or extensions, and `--no-sandbox` when
//! running as root, where Chromium refuses to start otherwise.
//!
//! Loopback only: host names other than `localhost` do not resolve (`--host-resolver-rules`), and
//! every request that is not to a loopback address goes to a proxy on `127.0.0.1:9`, where
//! nothing listens (loopback bypasses proxies), so it fails at once and nothing leaves the
//! machine.
//!
//! The protocol runs over `--remote-debugging-pipe`: Chromium reads NUL-terminated JSON commands
//! from its fd 3 and writes answers and events to its fd 4. The workspace forbids `unsafe`, which
//! rules out arranging fds in the child with `pre_exec`; `/bin/sh` does it instead, moving the
//! child's stdin and stdout pipes to fds 3 and 4 before it `exec`s Chromium. No WebSocket client,
//! no port to find, and no other process on the machine can talk to this browser.
//!
//! [`Browser::open`] makes a [`Page`] (a new tab in the one browser context, so cookies persist
//! across navigations and tabs). A page records its console messages, uncaught exceptions and
//! the browser's log entries (network errors, CORS refusals) in [`Page::console`], and the errors
//! [`Page::eval`] and [`Page::wait_for`] return carry them, so a failed assertion shows what the
//! page said. The API blocks; an async test calls it from `tokio::task::spawn_blocking`.
//!
//! Dropping the [`Browser`] (and its pages) asks Chromium to close, kills it if it has not within
//! a few seconds, and removes the temporary directory. A test process killed outright leaves no
//! browser behind either: Chromium exits when its end of the pipe closes.
//!
//! Not handled: JavaScript dialogs (`alert`, `confirm`, `beforeunload`) block the page, and an
//! evaluation waits for them until [`CALL_TIMEOUT`].
//!
//! Tests call [`Browser::launch_if_available`]: without Chromium it says so on stderr and returns
//! `None`, unless `SNUG_REQUIRE_BROWSER=1` (set by `.ci/run`), where it panics, the rule the
//! Garage and Docker suites follow.

use std::{
    collections::HashMap,
    fmt::Write as _,
    io::{BufRead as _, BufReader, Read as _, Write as _},
    net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream},
    os::unix::fs::MetadataExt as _,
    path::{Path, PathBuf},
    process::{Child, ChildStdin, ChildStdout, Command, Stdio},
    sync::{
        Arc, Condvar, Mutex, MutexGuard,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    thread::JoinHandle,
    time::{Duration, Instant},
};

use serde_json::{Value, json};

/// How long one DevTools command may take, a navigation or an awaited promise included.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// How long Chromium may take to start and answer its first command: a cold start on a busy
/// two-core CI machine takes a few seconds.
const LAUNCH_TIMEOUT: Duration = Duration::from_secs(60);

/// How long a dropped browser has to close before it is killed.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);

/// The group the objects of a top-level `await` evaluation belong to, released after each evaluation.
const OBJECT_GROUP: &str = "snug-test-support";

/// How often [`Page::wait_for`] evaluates its expression.
const POLL: Duration = Duration::from_millis(50);

/// The names Chromium goes by on `PATH`, in order of preference.
const BINARIES: [&str; 4] = [
    "chromium",
    "chromium-browser",
    "google-chrome",
    "google-chrome-stable",
];

/// Why driving the browser failed.
#[derive(Debug, thiserror::Error)]
pub enum BrowserError {
    /// No Chromium binary was found.
    #[error(
        "no Chromium: set SNUG_TEST_CHROMIUM or put one of {BINARIES:?} on PATH (Debian: apt-get \
         install chromium)"
    )]
    NotInstalled,
    /// The binary could not be started, or its temporary directory made.
    #[error("starting {binary}: {source}")]
    Spawn {
        /// The binary.
        binary: PathBuf,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// Chromium exited or closed its end of the protocol pipe.
    #[error("chromium is gone ({reason}); its log ends:\n{log}")]
    Closed {
        /// What was seen: the pipe's end, or an error writing to it.
        reason: String,
        /// The last lines Chromium wrote to stderr.
        log: String,
    },
    /// A DevTools command had no answer in time.
    #[error("{method} had no answer within {after:?}")]
    Timeout {
        /// The command.
        method: String,
        /// How long it was waited for.
        after: Duration,
    },
    /// A DevTools command was refused.
    #[error("{method} failed: {message}")]
    Protocol {
        /// The command.
        method: String,
        /// Chromium's error message.
        message: String,
    },
    /// A navigation failed (the `errorText` of `Page.navigate`, e.g. `net::ERR_CONNECTION_REFUSED`).
    #[error("navigating to {url} failed: {error}\nconsole:\n{console}")]
    Navigation {
        /// Where the page was sent.
        url: String,
        /// Chromium's network error.
        error: String,
        /// The page's console until then.
        console: String,
    },
    /// The evaluated expression threw, or its promise rejected.
    #[error("{expression} threw: {message}\nconsole:\n{console}")]
    Exception {
        /// The expression.
        expression: String,
        /// The exception's description (its stack when it has one).
        message: String,
        /// The page's console until then.
        console: String,
    },
    /// [`Page::wait_for`]'s expression did not become truthy in time.
    #[error("waited {after:?} for {expression} on {url}; it last gave {last}\nconsole:\n{console}")]
    WaitTimeout {
        /// The expression.
        expression: String,
        /// How long it was waited for.
        after: Duration,
        /// The page's URL at the end.
        url: String,
        /// The last value, or the last error evaluating it.
        last: String,
        /// The page's console until then.
        console: String,
    },
}

/// One headless Chromium; see the module docs.
pub struct Browser {
    connection: Arc<Connection>,
}

impl std::fmt::Debug for Browser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Browser")
            .field("binary", &self.connection.binary)
            .field("pid", &self.pid())
            .finish_non_exhaustive()
    }
}

impl Browser {
    /// The Chromium binary: `SNUG_TEST_CHROMIUM` (which must then exist), else the first of
    /// `chromium`, `chromium-browser`, `google-chrome`, `google-chrome-stable` on `PATH`.
    #[track_caller]
    pub fn binary() -> Option<PathBuf> {
        if let Some(path) = std::env::var_os("SNUG_TEST_CHROMIUM") {
            let path = PathBuf::from(path);
            assert!(
                path.is_file(),
                "SNUG_TEST_CHROMIUM={} is not a file",
                path.display()
            );
            return Some(path);
        }
        let dirs: Vec<PathBuf> = std::env::var_os("PATH")
            .map(|paths| std::env::split_paths(&paths).collect())
            .unwrap_or_default();
        BINARIES.iter().find_map(|name| {
            dirs.iter()
                .map(|dir| dir.join(name))
                .find(|candidate| candidate.is_file())
        })
    }

    /// Launches Chromium, or returns `None` (after saying why on stderr) when there is none and
    /// `SNUG_REQUIRE_BROWSER` is not `1`. Panics when there is one and it does not start.
    #[track_caller]
    pub fn launch_if_available() -> Option<Self> {
        match Self::launch() {
            Ok(browser) => Some(browser),
            Err(BrowserError::NotInstalled) => {
                let required = std::env::var("SNUG_REQUIRE_BROWSER").is_ok_and(|v| v == "1");
                assert!(
                    !required,
                    "SNUG_REQUIRE_BROWSER=1 but {}",
                    BrowserError::NotInstalled
                );
                let test = std::thread::current().name().unwrap_or("test").to_owned();
                // Straight to the process's stderr, past the harness's capture: a skip must be seen.
                let _ = writeln!(
                    std::io::stderr(),
                    "{test} SKIPPED: {} (SNUG_REQUIRE_BROWSER=1 makes this a failure)",
                    BrowserError::NotInstalled
                );
                None
            }
            Err(error) => panic!("launching Chromium: {error}"),
        }
    }

    /// Launches [`Browser::binary`] and waits until it answers over the protocol pipe.
    pub fn launch() -> Result<Self, BrowserError> {
        let binary = Self::binary().ok_or(BrowserError::NotInstalled)?;
        Self::launch_binary(&binary)
    }

    /// Launches `binary` (Chromium or Chrome) and waits until it answers.
    pub fn launch_binary(binary: &Path) -> Result<Self, BrowserError> {
        let spawn_error = |source| BrowserError::Spawn {
            binary: binary.to_owned(),
            source,
        };
        let dir = tempfile::Builder::new()
            .prefix("snug-chromium-")
            .tempdir()
            .map_err(spawn_error)?;
        let log = dir.path().join("chromium.log");
        let stderr = std::fs::File::create(&log).map_err(spawn_error)?;
        let mut command = Command::new("/bin/sh");
        // fd 3 is the child's end of the pipe this process writes commands to, fd 4 the end it
        // reads from; Chromium's own stdout joins its stderr in the log.
        command
            .arg("-c")
            .arg(r#"exec "$@" 3<&0 4>&1 0</dev/null 1>&2"#)
            .arg("sh")
            .arg(binary)
            .args(arguments(dir.path()))
            .env("HOME", dir.path())
            .env("XDG_CONFIG_HOME", dir.path().join("config"))
            .env("XDG_CACHE_HOME", dir.path().join("cache"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr);
        let mut child = command.spawn().map_err(spawn_error)?;
        let (Some(commands), Some(answers)) = (child.stdin.take(), child.stdout.take()) else {
            unreachable!("stdin and stdout are piped");
        };
        let shared = Arc::new(Shared::default());
        let reader = {
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name("chromium-devtools".to_owned())
                .spawn(move || read_answers(answers, &shared))
                .map_err(spawn_error)?
        };
        let browser = Self {
            connection: Arc::new(Connection {
                binary: binary.to_owned(),
                child: Mutex::new(child),
                commands: Mutex::new(Some(commands)),
                next_id: AtomicU64::new(1),
                shared,
                _reader: reader,
                log,
                dir,
            }),
        };
        browser
            .connection
            .call(None, "Browser.getVersion", json!({}), LAUNCH_TIMEOUT)?;
        Ok(browser)
    }

    /// The browser's product and version, e.g. `Chrome/156.0.8078.114`.
    pub fn version(&self) -> Result<String, BrowserError> {
        let version = self
            .connection
            .call(None, "Browser.getVersion", json!({}), CALL_TIMEOUT)?;
        Ok(version["product"].as_str().unwrap_or_default().to_owned())
    }

    /// Opens a new tab and navigates it to `url` (see [`Page::navigate`]); `about:blank` leaves
    /// it empty.
    pub fn open(&self, url: &str) -> Result<Page, BrowserError> {
        let target = self.connection.call(
            None,
            "Target.createTarget",
            json!({ "url": "about:blank" }),
            CALL_TIMEOUT,
        )?;
        let target_id = string(&target, "targetId", "Target.createTarget")?;
        let attached = self.connection.call(
            None,
            "Target.attachToTarget",
            json!({ "targetId": target_id, "flatten": true }),
            CALL_TIMEOUT,
        )?;
        let session_id = string(&attached, "sessionId", "Target.attachToTarget")?;
        let page = Page {
            connection: Arc::clone(&self.connection),
            target_id,
            session_id,
        };
        // Runtime: console messages and exceptions; Log: the browser's own messages about the
        // page (failed loads, CORS refusals); Inspector: a crashed renderer.
        for domain in ["Runtime.enable", "Log.enable", "Inspector.enable"] {
            page.call(domain, json!({}))?;
        }
        if url != "about:blank" {
            page.navigate(url)?;
        }
        Ok(page)
    }

    /// Every cookie the browser holds, as `Storage.getCookies` gives them (`name`, `value`,
    /// `domain`, `path`, `httpOnly`, `secure`, `sameSite`, ...).
    pub fn cookies(&self) -> Result<Vec<Value>, BrowserError> {
        let cookies = self
            .connection
            .call(None, "Storage.getCookies", json!({}), CALL_TIMEOUT)?;
        Ok(cookies["cookies"].as_array().cloned().unwrap_or_default())
    }

    /// The browser process's id (the Debian launcher script `exec`s it, so it is the child's).
    pub fn pid(&self) -> u32 {
        lock(&self.connection.child).id()
    }

    /// The temporary directory holding the profile and the log; removed on drop.
    pub fn dir(&self) -> &Path {
        self.connection.dir.path()
    }

    /// What Chromium wrote to stdout and stderr so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.connection.log).unwrap_or_default()
    }
}

/// One tab of a [`Browser`]; closed on drop.
#[derive(Debug)]
pub struct Page {
    connection: Arc<Connection>,
    target_id: String,
    session_id: String,
}

impl Page {
    /// Navigates the tab to `url`, follows its redirects, and waits until the document it lands
    /// on has loaded (`document.readyState` is `complete`). A network failure (a refused
    /// connection, a host outside loopback) is [`BrowserError::Navigation`]; an HTTP error
    /// status is a loaded page like any other.
    pub fn navigate(&self, url: &str) -> Result<(), BrowserError> {
        let navigated = self.call("Page.navigate", json!({ "url": url }))?;
        if let Some(error) = navigated["errorText"].as_str().filter(|e| !e.is_empty()) {
            return Err(BrowserError::Navigation {
                url: url.to_owned(),
                error: error.to_owned(),
                console: self.console().join("\n"),
            });
        }
        self.wait_for("document.readyState === 'complete'", CALL_TIMEOUT)?;
        Ok(())
    }

    /// Evaluates `expression` (any script: its completion value counts) in the page's main frame
    /// and returns its value as JSON, awaiting it when it is a promise. `await` may be used at
    /// the top level (the script then runs as DevTools' console runs it).
    /// `undefined` is `null`; numbers JSON cannot hold (`NaN`, `Infinity`, `-0`, BigInts) are
    /// their JavaScript spelling as a string. A throw or a rejection is
    /// [`BrowserError::Exception`].
    pub fn eval(&self, expression: &str) -> Result<Value, BrowserError> {
        let object = self.evaluate(expression)?;
        Ok(match object.get("unserializableValue") {
            Some(spelling) => spelling.clone(),
            None => object.get("value").cloned().unwrap_or(Value::Null),
        })
    }

    /// Evaluates `expression` every 50 ms until its value is truthy, as JavaScript judges it, and
    /// returns that value; [`BrowserError::WaitTimeout`] after `timeout`. Errors while the page
    /// is between documents (a navigation destroys the context an evaluation ran in) count as
    /// not yet.
    pub fn wait_for(&self, expression: &str, timeout: Duration) -> Result<Value, BrowserError> {
        let started = Instant::now();
        let mut last;
        loop {
            match self.evaluate(expression) {
                Ok(object) if truthy(&object) => {
                    return Ok(object.get("value").cloned().unwrap_or(Value::Null));
                }
                Ok(object) => last = object.to_string(),
                Err(closed @ BrowserError::Closed { .. }) => return Err(closed),
                Err(error) => last = error.to_string(),
            }
            if started.elapsed() >= timeout {
                return Err(BrowserError::WaitTimeout {
                    expression: expression.to_owned(),
                    after: timeout,
                    url: self.url().unwrap_or_else(|e| format!("(unknown: {e})")),
                    last,
                    console: self.console().join("\n"),
                });
            }
            std::thread::sleep(POLL);
        }
    }

    /// The URL of the document the tab shows (after redirects).
    pub fn url(&self) -> Result<String, BrowserError> {
        let info = self.connection.call(
            None,
            "Target.getTargetInfo",
            json!({ "targetId": self.target_id }),
            CALL_TIMEOUT,
        )?;
        Ok(info["targetInfo"]["url"]
            .as_str()
            .unwrap_or_default()
            .to_owned())
    }

    /// What the page said so far, one line per message: `console.<type>: <arguments>`,
    /// `exception: <description>`, `log.<level> (<source>): <text> <url>`, `crashed`.
    pub fn console(&self) -> Vec<String> {
        lock(&self.connection.shared.state)
            .console
            .get(&self.session_id)
            .cloned()
            .unwrap_or_default()
    }

    /// The value of `expression` as a `Runtime.RemoteObject` carrying its value (`value` or
    /// `unserializableValue`), or the exception it threw.
    fn evaluate(&self, expression: &str) -> Result<Value, BrowserError> {
        let evaluated = self.call(
            "Runtime.evaluate",
            json!({
                "expression": expression,
                "awaitPromise": true,
                "returnByValue": true,
                "userGesture": true,
            }),
        )?;
        match self.exception(expression, evaluated) {
            Ok(mut evaluated) => Ok(evaluated["result"].take()),
            // A script cannot `await` at its top level: nothing ran, so run it again in console
            // mode, which can.
            Err(BrowserError::Exception { message, .. })
                if message.starts_with("SyntaxError") && message.contains("await") =>
            {
                self.evaluate_awaiting(expression)
            }
            Err(error) => Err(error),
        }
    }

    /// [`Page::evaluate`] in console mode (`replMode`), for top-level `await`. Console mode
    /// awaits its own wrapper, not the value the expression yields, so a promise comes back as
    /// an object: it is then awaited by id, and any other object is fetched by value by id.
    fn evaluate_awaiting(&self, expression: &str) -> Result<Value, BrowserError> {
        let evaluated = self.call(
            "Runtime.evaluate",
            json!({
                "expression": expression,
                "objectGroup": OBJECT_GROUP,
                "awaitPromise": true,
                "replMode": true,
                "userGesture": true,
            }),
        )?;
        let mut evaluated = self.exception(expression, evaluated)?;
        let object = &evaluated["result"];
        let Some(object_id) = object["objectId"].as_str() else {
            return Ok(evaluated["result"].take());
        };
        let by_value = if object["subtype"] == "promise" {
            self.call(
                "Runtime.awaitPromise",
                json!({ "promiseObjectId": object_id, "returnByValue": true }),
            )
        } else {
            self.call(
                "Runtime.callFunctionOn",
                json!({
                    "objectId": object_id,
                    "functionDeclaration": "function () { return this; }",
                    "returnByValue": true,
                }),
            )
        }
        .and_then(|answer| self.exception(expression, answer));
        // The page keeps the objects it handed out until they are released.
        let _ = self.call(
            "Runtime.releaseObjectGroup",
            json!({ "objectGroup": OBJECT_GROUP }),
        );
        Ok(by_value?["result"].take())
    }

    /// `answer`, or [`BrowserError::Exception`] when it reports one.
    fn exception(&self, expression: &str, answer: Value) -> Result<Value, BrowserError> {
        let Some(details) = answer.get("exceptionDetails") else {
            return Ok(answer);
        };
        let message = details["exception"]["description"]
            .as_str()
            .or(details["exception"]["value"].as_str())
            .or(details["text"].as_str())
            .unwrap_or("an exception")
            .to_owned();
        Err(BrowserError::Exception {
            expression: expression.to_owned(),
            message,
            console: self.console().join("\n"),
        })
    }

    /// Sends `method` to this tab's session.
    fn call(&self, method: &str, params: Value) -> Result<Value, BrowserError> {
        self.connection
            .call(Some(&self.session_id), method, params, CALL_TIMEOUT)
    }
}

impl Drop for Page {
    fn drop(&mut self) {
        // Best effort: a browser that is gone has closed its tabs anyway.
        let _ = self.connection.call(
            None,
            "Target.closeTarget",
            json!({ "targetId": self.target_id }),
            CLOSE_TIMEOUT,
        );
        lock(&self.connection.shared.state)
            .console
            .remove(&self.session_id);
    }
}

/// JavaScript's truthiness of a `Runtime.RemoteObject`.
fn truthy(object: &Value) -> bool {
    if let Some(spelling) = object["unserializableValue"].as_str() {
        return !matches!(spelling, "NaN" | "-0" | "0n");
    }
    match object.get("value") {
        None => object["type"] != "undefined",
        Some(Value::Null) => false,
        Some(Value::Bool(value)) => *value,
        Some(Value::Number(value)) => value.as_f64() != Some(0.0),
        Some(Value::String(value)) => !value.is_empty(),
        Some(_) => true,
    }
}

/// Chromium's arguments; see the module docs for why each is there.
fn arguments(dir: &Path) -> Vec<String> {
    let mut arguments: Vec<String> = [
        "--headless=new",
        "--remote-debugging-pipe",
        "--no-first-run",
        "--no-default-browser-check",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-extensions",
        "--disable-default-apps",
        "--disable-breakpad",
        "--disable-domain-reliability",
        "--disable-client-side-phishing-detection",
        "--disable-features=Translate,OptimizationHints,MediaRouter,DialMediaRouteProvider,\
         AutofillServerCommunication,CertificateTransparencyComponentUpdater",
        "--no-pings",
        "--metrics-recording-only",
        "--password-store=basic",
        "--mute-audio",
        "--disable-gpu",
        // Containers give /dev/shm 64 MiB, too little for a renderer.
        "--disable-dev-shm-usage",
        "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE localhost, EXCLUDE 127.0.0.1, EXCLUDE [::1]",
        "--proxy-server=http://127.0.0.1:9",
        "--proxy-bypass-list=localhost;127.0.0.1;[::1]",
    ]
    .map(str::to_owned)
    .into();
    arguments.push(format!("--user-data-dir={}", dir.join("profile").display()));
    // Chromium's sandbox refuses to run as root.
    if std::fs::metadata("/proc/self").is_ok_and(|me| me.uid() == 0) {
        arguments.push("--no-sandbox".to_owned());
    }
    arguments.push("about:blank".to_owned());
    arguments
}

/// The browser end of the protocol pipe: shared by the [`Browser`] and its [`Page`]s, and torn
/// down when the last of them is dropped.
struct Connection {
    binary: PathBuf,
    child: Mutex<Child>,
    /// Chromium's fd 3; `None` once closing.
    commands: Mutex<Option<ChildStdin>>,
    next_id: AtomicU64,
    shared: Arc<Shared>,
    /// Ends by itself at the pipe's end; never joined, so a stuck pipe cannot hang a drop.
    _reader: JoinHandle<()>,
    log: PathBuf,
    /// Declared last: removed after the process is gone.
    dir: tempfile::TempDir,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("binary", &self.binary)
            .finish_non_exhaustive()
    }
}

/// What the reader thread hands to callers.
#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    changed: Condvar,
}

#[derive(Default)]
struct State {
    /// Answers by command id, until their caller takes them.
    answers: HashMap<u64, Value>,
    /// Console lines by session id.
    console: HashMap<String, Vec<String>>,
    /// Why the pipe is closed, once it is.
    closed: Option<String>,
}

impl Connection {
    /// Sends a command (to the browser, or to a tab's session) and waits for its answer.
    fn call(
        &self,
        session: Option<&str>,
        method: &str,
        params: Value,
        timeout: Duration,
    ) -> Result<Value, BrowserError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut message = json!({ "id": id, "method": method, "params": params });
        if let Some(session) = session {
            message["sessionId"] = session.into();
        }
        let mut bytes = message.to_string().into_bytes();
        bytes.push(0);
        {
            let mut commands = lock(&self.commands);
            let written = match commands.as_mut() {
                Some(pipe) => pipe.write_all(&bytes).and_then(|()| pipe.flush()),
                None => Err(std::io::Error::other("the browser is closing")),
            };
            if let Err(error) = written {
                return Err(self.closed(format!("writing {method}: {error}")));
            }
        }
        let deadline = Instant::now() + timeout;
        let mut state = lock(&self.shared.state);
        loop {
            if let Some(mut answer) = state.answers.remove(&id) {
                if let Some(error) = answer.get("error") {
                    return Err(BrowserError::Protocol {
                        method: method.to_owned(),
                        message: error["message"].as_str().unwrap_or("").to_owned()
                            + error["data"].as_str().map_or("", |_| ": ")
                            + error["data"].as_str().unwrap_or(""),
                    });
                }
                return Ok(answer["result"].take());
            }
            if let Some(reason) = state.closed.clone() {
                drop(state);
                return Err(self.closed(reason));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(BrowserError::Timeout {
                    method: method.to_owned(),
                    after: timeout,
                });
            }
            state = self
                .shared
                .changed
                .wait_timeout(state, left)
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
        }
    }

    /// [`BrowserError::Closed`] with Chromium's exit status and the end of its log.
    fn closed(&self, mut reason: String) -> BrowserError {
        // The pipe closes a moment before the process is gone.
        let deadline = Instant::now() + Duration::from_secs(1);
        let status = loop {
            match lock(&self.child).try_wait() {
                Ok(None) if Instant::now() < deadline => {}
                Ok(status) => break status,
                Err(_) => break None,
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        match status {
            Some(status) => _ = write!(reason, "; it {status}"),
            None => reason.push_str("; it is still running"),
        }
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        BrowserError::Closed {
            reason,
            log: lines[lines.len().saturating_sub(30)..].join("\n"),
        }
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        // A clean close lets Chromium end its helper processes itself; a kill is the fallback.
        let _ = self.call(None, "Browser.close", json!({}), CLOSE_TIMEOUT);
        lock(&self.commands).take();
        let mut child = lock(&self.child);
        let deadline = Instant::now() + CLOSE_TIMEOUT;
        while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// The reader thread: files answers by id and events' console lines by session until the pipe
/// ends, then marks the connection closed.
fn read_answers(answers: ChildStdout, shared: &Shared) {
    let mut reader = BufReader::new(answers);
    let mut message = Vec::new();
    let reason = loop {
        message.clear();
        match reader.read_until(0, &mut message) {
            Ok(0) => break "chromium closed the DevTools pipe".to_owned(),
            Ok(_) => {}
            Err(error) => break format!("reading the DevTools pipe: {error}"),
        }
        if message.last() == Some(&0) {
            message.pop();
        }
        let Ok(mut message) = serde_json::from_slice::<Value>(&message) else {
            continue;
        };
        if let Some(id) = message["id"].as_u64() {
            lock(&shared.state).answers.insert(id, message);
            shared.changed.notify_all();
        } else if let Some(line) = console_line(&mut message)
            && let Some(session) = message["sessionId"].as_str()
        {
            lock(&shared.state)
                .console
                .entry(session.to_owned())
                .or_default()
                .push(line);
        }
    };
    lock(&shared.state).closed = Some(reason);
    shared.changed.notify_all();
}

/// The console line an event makes, if it makes one.
fn console_line(event: &mut Value) -> Option<String> {
    let params = event["params"].take();
    match event["method"].as_str()? {
        "Runtime.consoleAPICalled" => {
            let arguments: Vec<String> = params["args"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|argument| match &argument["value"] {
                    Value::String(text) => text.clone(),
                    Value::Null => argument["unserializableValue"]
                        .as_str()
                        .or(argument["description"].as_str())
                        .or(argument["type"].as_str())
                        .unwrap_or("?")
                        .to_owned(),
                    value => value.to_string(),
                })
                .collect();
            Some(format!(
                "console.{}: {}",
                params["type"].as_str().unwrap_or("log"),
                arguments.join(" ")
            ))
        }
        "Runtime.exceptionThrown" => {
            let details = &params["exceptionDetails"];
            let description = details["exception"]["description"]
                .as_str()
                .or(details["text"].as_str())
                .unwrap_or("?");
            Some(format!("exception: {description}"))
        }
        "Log.entryAdded" => {
            let entry = &params["entry"];
            let mut line = format!(
                "log.{} ({}): {}",
                entry["level"].as_str().unwrap_or("?"),
                entry["source"].as_str().unwrap_or("?"),
                entry["text"].as_str().unwrap_or("")
            );
            if let Some(url) = entry["url"].as_str() {
                let _ = write!(line, " {url}");
            }
            Some(line)
        }
        "Inspector.targetCrashed" => Some("crashed".to_owned()),
        _ => None,
    }
}

/// `answer[key]` as a string, or a protocol error naming `method`.
fn string(answer: &Value, key: &str, method: &str) -> Result<String, BrowserError> {
    answer[key]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| BrowserError::Protocol {
            method: method.to_owned(),
            message: format!("no {key} in {answer}"),
        })
}

/// Locks `mutex`, taking over a poisoned one: the state stays consistent between statements.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A tiny HTTP/1.1 server on a free `127.0.0.1` port, for the pages a [`Browser`] loads: every
/// request goes to the handler, is answered with `Connection: close`, and is recorded for
/// [`Site::requests`]. Stops on drop.
pub struct Site {
    addr: SocketAddr,
    requests: Arc<Mutex<Vec<Request>>>,
    stopping: Arc<AtomicBool>,
    acceptor: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Site {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Site")
            .field("origin", &self.origin())
            .finish_non_exhaustive()
    }
}

/// One request a [`Site`] received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// `GET`, `POST`, `OPTIONS`, ...
    pub method: String,
    /// The request target: path and query.
    pub path: String,
    /// The header fields in order, names lowercased.
    pub headers: Vec<(String, String)>,
    /// The body (`Content-Length` bytes).
    pub body: Vec<u8>,
}

impl Request {
    /// The first value of header `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// A [`Site`]'s answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// The status code.
    pub status: u16,
    /// Header fields besides `Content-Length` and `Connection`.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
}

impl Response {
    /// `200` with an HTML body.
    pub fn html(body: &str) -> Self {
        Self {
            status: 200,
            headers: vec![("Content-Type".into(), "text/html; charset=utf-8".into())],
            body: body.as_bytes().to_vec(),
        }
    }

    /// `200` with a plain-text body.
    pub fn text(body: &str) -> Self {
        Self {
            status: 200,
            headers: vec![("Content-Type".into(), "text/plain; charset=utf-8".into())],
            body: body.as_bytes().to_vec(),
        }
    }

    /// `302 Found` to `location`.
    pub fn redirect(location: &str) -> Self {
        Self {
            status: 302,
            headers: vec![("Location".into(), location.into())],
            body: Vec::new(),
        }
    }

    /// `status` with an empty body.
    pub fn status(status: u16) -> Self {
        Self {
            status,
            headers: Vec::new(),
            body: Vec::new(),
        }
    }

    /// Adds a header field.
    #[must_use]
    pub fn with_header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }
}

impl Site {
    /// Serves `handler` on a free `127.0.0.1` port.
    #[track_caller]
    pub fn start(handler: impl Fn(&Request) -> Response + Send + Sync + 'static) -> Self {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("local address");
        let requests = Arc::new(Mutex::new(Vec::new()));
        let stopping = Arc::new(AtomicBool::new(false));
        let handler = Arc::new(handler);
        let acceptor = {
            let requests = Arc::clone(&requests);
            let stopping = Arc::clone(&stopping);
            std::thread::spawn(move || {
                for stream in listener.incoming() {
                    if stopping.load(Ordering::SeqCst) {
                        break;
                    }
                    let Ok(stream) = stream else { continue };
                    let handler = Arc::clone(&handler);
                    let requests = Arc::clone(&requests);
                    // One thread per connection: Chromium opens speculative connections that
                    // may never carry a request.
                    std::thread::spawn(move || {
                        let _ = serve_one(stream, &*handler, &requests);
                    });
                }
            })
        };
        Self {
            addr,
            requests,
            stopping,
            acceptor: Some(acceptor),
        }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn origin(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The origin followed by `path` (which starts with `/`).
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.origin())
    }

    /// Every request received so far, in order of arrival.
    pub fn requests(&self) -> Vec<Request> {
        lock(&self.requests).clone()
    }

    /// The requests received so far for `path` (path and query, exactly).
    pub fn requests_for(&self, path: &str) -> Vec<Request> {
        lock(&self.requests)
            .iter()
            .filter(|r| r.path == path)
            .cloned()
            .collect()
    }
}

impl Drop for Site {
    fn drop(&mut self) {
        self.stopping.store(true, Ordering::SeqCst);
        // Wakes the acceptor, which then sees the flag.
        let _ = TcpStream::connect(self.addr);
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
    }
}

/// Reads one request from `stream`, records it and writes the handler's answer.
fn serve_one(
    mut stream: TcpStream,
    handler: &dyn Fn(&Request) -> Response,
    requests: &Mutex<Vec<Request>>,
) -> std::io::Result<()> {
    stream.set_read_timeout(Some(CALL_TIMEOUT))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let mut words = line.split_whitespace();
    let (Some(method), Some(path)) = (words.next(), words.next()) else {
        return Ok(());
    };
    let (method, path) = (method.to_owned(), path.to_owned());
    let mut headers = Vec::new();
    loop {
        line.clear();
        if reader.read_line(&mut line)? == 0 || line.trim_end().is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            headers.push((name.trim().to_ascii_lowercase(), value.trim().to_owned()));
        }
    }
    let length = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .and_then(|(_, v)| v.parse::<u64>().ok())
        .unwrap_or(0);
    let mut body = Vec::new();
    reader.take(length).read_to_end(&mut body)?;
    let request = Request {
        method,
        path,
        headers,
        body,
    };
    let response = handler(&request);
    lock(requests).push(request);
    let mut head = format!("HTTP/1.1 {} Snug\r\n", response.status);
    for (name, value) in &response.headers {
        let _ = write!(head, "{name}: {value}\r\n");
    }
    let _ = write!(
        head,
        "Content-Length: {}\r\nConnection: close\r\n\r\n",
        response.body.len()
    );
    stream.write_all(head.as_bytes())?;
    stream.write_all(&response.body)?;
    stream.flush()
}
