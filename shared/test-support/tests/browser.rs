//! The Chromium driver against a real Chromium and two loopback sites: navigations and
//! redirects across origins, cookies that persist, CORS enforced by the browser (a credentialed
//! cross-origin fetch refused without the server's consent and allowed with it), evaluation of
//! async expressions, the page's console in failures, loopback-only networking, and a clean
//! teardown.
//!
//! Skips (visibly) without Chromium unless `SNUG_REQUIRE_BROWSER=1` (`.ci/run`).

use std::{
    path::Path,
    sync::{Arc, OnceLock},
    time::{Duration, Instant},
};

use serde_json::json;
use snug_test_support::browser::{Browser, BrowserError, Page, Request, Response, Site};

/// Two sites on two loopback ports; each knows the other's origin.
struct Sites {
    a: Site,
    b: Site,
}

fn sites() -> Sites {
    let a_origin = Arc::new(OnceLock::<String>::new());
    let b_origin = Arc::new(OnceLock::<String>::new());
    let a = {
        let b_origin = Arc::clone(&b_origin);
        Site::start(move |request: &Request| {
            let b = b_origin.get().expect("b's origin");
            match request.path.as_str() {
                "/" => Response::html("<title>a</title>home").with_header(
                    "Set-Cookie",
                    "a_session=one; Path=/; SameSite=Lax; HttpOnly",
                ),
                "/second" => Response::html("<title>a</title>second"),
                "/go" => Response::redirect(&format!("{b}/bounce")),
                "/landed" => Response::html("<script>console.log('landed', 42)</script>landed"),
                _ => Response::status(404),
            }
        })
    };
    let b = {
        let a_origin = Arc::clone(&a_origin);
        Site::start(move |request: &Request| {
            let a = a_origin.get().expect("a's origin");
            let cookie = request.header("cookie").unwrap_or("").to_owned();
            let consent = |response: Response| {
                response
                    .with_header("Access-Control-Allow-Origin", a)
                    .with_header("Access-Control-Allow-Credentials", "true")
                    .with_header("Vary", "Origin")
            };
            match (request.method.as_str(), request.path.as_str()) {
                (_, "/bounce") => Response::redirect(&format!("{a}/landed"))
                    .with_header("Set-Cookie", "b_mark=two; Path=/; SameSite=Lax"),
                // No CORS headers: the browser must keep the answer from the page.
                (_, "/closed") => Response::text("secret"),
                ("OPTIONS", "/open") => consent(Response::status(204))
                    .with_header("Access-Control-Allow-Methods", "PUT")
                    .with_header("Access-Control-Allow-Headers", "content-type"),
                (_, "/open") => consent(Response::text(&format!("shared; cookie: {cookie}"))),
                _ => Response::status(404),
            }
        })
    };
    a_origin.set(a.origin()).expect("set once");
    b_origin.set(b.origin()).expect("set once");
    Sites { a, b }
}

fn cookie_of(request: &Request) -> String {
    request.header("cookie").unwrap_or("").to_owned()
}

#[test]
fn navigations_redirect_across_origins_and_cookies_persist() {
    let Some(browser) = Browser::launch_if_available() else {
        return;
    };
    let Sites { a, b } = sites();
    assert!(browser.version().expect("version").contains("Chrome/"));

    let page = browser.open(&a.url("/")).expect("open a");
    assert_eq!(page.url().expect("url"), a.url("/"));
    assert_eq!(cookie_of(&a.requests_for("/")[0]), "");

    // A cookie set by one answer is sent with the next request.
    page.navigate(&a.url("/second")).expect("navigate");
    assert_eq!(page.url().expect("url"), a.url("/second"));
    assert_eq!(cookie_of(&a.requests_for("/second")[0]), "a_session=one");
    // HttpOnly: the page cannot read it.
    assert_eq!(page.eval("document.cookie").expect("eval"), json!(""));

    // Redirected to the other origin and back in one navigation.
    page.navigate(&a.url("/go")).expect("navigate");
    assert_eq!(page.url().expect("url"), a.url("/landed"));
    let bounce = b.requests_for("/bounce");
    assert_eq!(bounce.len(), 1, "{:?}", b.requests());
    // Cookies are scoped by host, not port: a loopback site sees every other one's cookies.
    assert_eq!(cookie_of(&bounce[0]), "a_session=one");
    assert_eq!(
        cookie_of(&a.requests_for("/landed")[0]),
        "a_session=one; b_mark=two"
    );
    assert_eq!(console_api(&page), ["console.log: landed 42"]);

    let mut cookies: Vec<_> = browser
        .cookies()
        .expect("cookies")
        .iter()
        .map(|c| (c["name"].clone(), c["value"].clone(), c["httpOnly"].clone()))
        .collect();
    cookies.sort_by_key(|c| c.0.to_string());
    assert_eq!(
        cookies,
        [
            (json!("a_session"), json!("one"), json!(true)),
            (json!("b_mark"), json!("two"), json!(false)),
        ]
    );

    // A second tab shares the browser's cookies.
    let second = browser.open(&a.url("/second")).expect("open again");
    assert_eq!(
        cookie_of(a.requests_for("/second").last().expect("second request")),
        "a_session=one; b_mark=two"
    );
    drop(second);
}

#[test]
fn the_browser_enforces_cors_on_credentialed_fetches() {
    let Some(browser) = Browser::launch_if_available() else {
        return;
    };
    let Sites { a, b } = sites();
    // b's cookie first, so that the credentialed fetches have one to send.
    let page = browser.open(&a.url("/go")).expect("open");
    assert_eq!(page.url().expect("url"), a.url("/landed"));

    let fetch = |path: &str, init: &str| {
        page.eval(&format!(
            "fetch('{}', {init}).then(r => r.text().then(t => `${{r.status}} ${{t}}`), e => `refused: ${{e.name}}`)",
            b.url(path)
        ))
        .expect("eval")
    };
    let credentials = "{ credentials: 'include' }";
    let put = "{ credentials: 'include', method: 'PUT', headers: { 'Content-Type': 'application/json' }, body: '{}' }";

    // No consent: the simple GET reaches the server (with the cookie), but the page never sees
    // the answer.
    assert_eq!(fetch("/closed", credentials), json!("refused: TypeError"));
    let closed = b.requests_for("/closed");
    assert_eq!(closed.len(), 1);
    assert!(cookie_of(&closed[0]).contains("b_mark=two"), "{closed:?}");
    assert_eq!(closed[0].header("origin"), Some(a.origin().as_str()));
    assert!(
        page.console().iter().any(|line| line.contains("CORS")),
        "{:?}",
        page.console()
    );
    // A PUT with a JSON body needs a preflight; refused there, it is never sent.
    assert_eq!(fetch("/closed", put), json!("refused: TypeError"));
    let methods: Vec<_> = b
        .requests_for("/closed")
        .iter()
        .map(|r| r.method.clone())
        .collect();
    assert_eq!(methods, ["GET", "OPTIONS"]);

    // With consent, the answer reaches the page and the cookie went with the request.
    assert_eq!(
        fetch("/open", credentials),
        json!("200 shared; cookie: b_mark=two")
    );
    assert_eq!(fetch("/open", put), json!("200 shared; cookie: b_mark=two"));
    let methods: Vec<_> = b
        .requests_for("/open")
        .iter()
        .map(|r| r.method.clone())
        .collect();
    assert_eq!(methods, ["GET", "OPTIONS", "PUT"]);
    // Without credentials no cookie is sent.
    assert_eq!(
        fetch("/open", "{ credentials: 'omit' }"),
        json!("200 shared; cookie: ")
    );
}

#[test]
fn eval_awaits_wait_for_polls_and_failures_carry_the_console() {
    let Some(browser) = Browser::launch_if_available() else {
        return;
    };
    let Sites { a, b: _b } = sites();
    let page = browser.open(&a.url("/second")).expect("open");

    let cases = [
        (
            "new Promise(r => setTimeout(() => r(41 + 1), 50))",
            json!(42),
        ),
        ("await Promise.resolve('top-level')", json!("top-level")),
        ("const r = await fetch('/second'); r.status", json!(200)),
        ("await 1; Promise.resolve({ n: 2 })", json!({ "n": 2 })),
        ("await 1; ({ n: 3 })", json!({ "n": 3 })),
        ("let n = 4; n", json!(4)),
        (
            "({ a: [1, 'b'], c: null })",
            json!({ "a": [1, "b"], "c": null }),
        ),
        ("undefined", json!(null)),
        ("0 / 0", json!("NaN")),
        ("location.origin", json!(a.origin())),
    ];
    for (expression, value) in cases {
        assert_eq!(
            page.eval(expression).expect(expression),
            value,
            "{expression}"
        );
    }

    let refusals = [
        ("throw new Error('boom')", "boom"),
        ("Promise.reject(new Error('rejected'))", "rejected"),
        ("await Promise.reject(new Error('awaited'))", "awaited"),
        (
            "await 1; Promise.reject(new Error('late rejection'))",
            "late rejection",
        ),
        // Not JSON.
        ("window", "Object reference chain is too long"),
        ("await 1; window", "Object reference chain is too long"),
        ("await fetch('/missing').then(r => r.json())", "SyntaxError"),
        ("no_such_variable", "ReferenceError"),
    ];
    for (expression, expected) in refusals {
        match page.eval(expression) {
            Err(error @ (BrowserError::Exception { .. } | BrowserError::Protocol { .. })) => {
                let text = error.to_string();
                assert!(text.contains(expected), "{expression}: {text}");
            }
            other => panic!("{expression}: {other:?}"),
        }
    }

    page.eval("setTimeout(() => { window.ready = 'yes' }, 200)")
        .expect("eval");
    assert_eq!(
        page.wait_for("window.ready", Duration::from_secs(10))
            .expect("ready"),
        json!("yes")
    );

    // An uncaught exception and a console message show up in a failed wait's error.
    page.eval("console.warn('about to fail'); setTimeout(() => { throw new Error('late') }, 0)")
        .expect("eval");
    let started = Instant::now();
    match page.wait_for("window.never", Duration::from_millis(300)) {
        Err(error @ BrowserError::WaitTimeout { .. }) => {
            let text = error.to_string();
            assert!(text.contains(&a.url("/second")), "{text}");
            assert!(text.contains("console.warning: about to fail"), "{text}");
            assert!(text.contains("exception: Error: late"), "{text}");
        }
        other => panic!("{other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[test]
fn navigations_outside_loopback_or_to_nothing_fail_at_once() {
    let Some(browser) = Browser::launch_if_available() else {
        return;
    };
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.local_addr().expect("address")
    };
    let page = browser.open("about:blank").expect("open");
    let cases = [
        (format!("http://{closed}/"), "net::ERR_CONNECTION_REFUSED"),
        (
            format!("http://localhost:{}/", closed.port()),
            "net::ERR_CONNECTION_REFUSED",
        ),
        // Off loopback, requests go to a proxy nobody runs.
        (
            "http://example.com/".to_owned(),
            "net::ERR_PROXY_CONNECTION_FAILED",
        ),
        (
            "http://192.0.2.1/".to_owned(),
            "net::ERR_PROXY_CONNECTION_FAILED",
        ),
        (
            "https://1.1.1.1/".to_owned(),
            "net::ERR_PROXY_CONNECTION_FAILED",
        ),
    ];
    for (url, expected) in cases {
        let started = Instant::now();
        match page.navigate(&url) {
            Err(BrowserError::Navigation { error, .. }) => {
                assert!(error.starts_with(expected), "{url}: {error}");
            }
            other => panic!("{url}: {other:?}"),
        }
        assert!(started.elapsed() < Duration::from_secs(10), "{url}");
    }
    // The page still works after failures.
    assert_eq!(page.eval("1 + 1").expect("eval"), json!(2));
}

#[test]
fn dropping_the_browser_ends_its_processes_and_removes_its_directory() {
    let Some(browser) = Browser::launch_if_available() else {
        return;
    };
    let page = browser.open("about:blank").expect("open");
    let dir = browser.dir().to_owned();
    assert!(dir.join("profile").is_dir());
    let marker = dir.display().to_string();
    assert!(
        !processes_naming(&marker).is_empty(),
        "no process names {marker}"
    );
    drop(browser);
    // The page keeps the connection alive; the last one out closes the browser.
    assert_eq!(
        page.eval("'still here'").expect("eval"),
        json!("still here")
    );
    drop(page);
    assert!(!dir.exists(), "{} remains", dir.display());
    let deadline = Instant::now() + Duration::from_secs(10);
    while !processes_naming(&marker).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(processes_naming(&marker), Vec::<String>::new());
}

#[test]
fn a_binary_that_is_not_a_browser_is_a_clear_error() {
    let cases = [
        ("/bin/false", "exit status: 1", ""),
        ("/nonexistent/chromium", "exit status: 127", "not found"),
    ];
    for (binary, status, log) in cases {
        match Browser::launch_binary(Path::new(binary)) {
            Err(BrowserError::Closed { reason, log: text }) => {
                assert!(reason.ends_with(status), "{binary}: {reason}");
                assert!(text.contains(log), "{binary}: {text}");
            }
            other => panic!("{binary}: {other:?}"),
        }
    }
}

/// The lines the page's own scripts logged (the browser adds its own, such as a missing
/// favicon).
fn console_api(page: &Page) -> Vec<String> {
    let mut lines = page.console();
    lines.retain(|line| line.starts_with("console."));
    lines
}

/// The command lines of the running processes that contain `marker`.
fn processes_naming(marker: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        if let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) {
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            if cmdline.contains(marker) {
                found.push(cmdline);
            }
        }
    }
    found
}
