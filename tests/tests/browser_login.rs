//! The browser login in a real browser (issue 20, point 3): headless Chromium on a page of an
//! origin the hub lists logs in through the test OpenID issuer (`GET /auth/login` → the issuer →
//! `GET /auth/callback` → back to the page), reads `/auth/me`, and pushes with `x-snug-csrf`;
//! a page of an origin the hub does not list cannot read or write anything, although the browser
//! holds the session.
//!
//! Skipped without Chromium unless SNUG_REQUIRE_BROWSER=1 (`.ci/run` sets it).

use serde_json::{Value, json};
use snug_e2e::{Hub, Options};
use snug_gateway::oidc::OidcArgs;
use snug_test_support::{
    browser::{Browser, Page, Response, Site},
    oidc::Issuer,
};

/// A page with nothing on it but its origin; the test drives it with `eval`.
fn site(image: Vec<u8>) -> Site {
    Site::start(move |request| match request.path.as_str() {
        "/image" => Response {
            status: 200,
            headers: vec![(
                "content-type".to_owned(),
                "application/octet-stream".to_owned(),
            )],
            body: image.clone(),
        },
        _ => Response::html("<!doctype html><title>app</title><p>app</p>"),
    })
}

/// Runs `script` (an async function body) in `page` and returns what it returns.
fn run(page: &Page, script: &str) -> Value {
    page.eval(&format!("(async () => {{ {script} }})()"))
        .unwrap_or_else(|err| panic!("{err}\nconsole: {:?}", page.console()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listed_origin_logs_in_reads_me_and_pushes_and_an_unlisted_one_cannot() {
    let Some(browser) = tokio::task::spawn_blocking(Browser::launch_if_available)
        .await
        .expect("launch")
    else {
        return;
    };
    let issuer = Issuer::start_at_path("/realms/snug").await;
    issuer.set_login_subject("alice");
    issuer.set_extra_claims(json!({"preferred_username": "alice"}));
    let image = snug_e2e::userdb_vector("fresh-v6.export.snug");
    let listed = site(image.clone());
    let unlisted = site(image.clone());
    let hub = Hub::start(Options {
        origins: vec![listed.origin()],
        oidc: Some(OidcArgs {
            issuers: vec![issuer.url().to_owned()],
            audience: Some(issuer.audience()),
            ..OidcArgs::default()
        }),
        ..Options::default()
    })
    .await;
    let hub_url = hub.url();
    let listed_origin = listed.origin();
    let after = listed.url("/after");
    let image_len = image.len();

    let (me, refused, pushed, stranger) = tokio::task::spawn_blocking(move || {
        let page = browser.open(&listed.url("/")).expect("open the app");
        // Top-level navigations, as a login button does: hub → issuer → hub → the app.
        page.navigate(&format!(
            "{hub_url}/auth/login?return_to={}",
            snug_test_support::oidc::form_encode(&after)
        ))
        .expect("the login flow");
        let landed = page.url().expect("url");
        assert!(landed.starts_with(&after), "the flow ended at {landed}");

        let me = run(
            &page,
            &format!(
                "const r = await fetch('{hub_url}/auth/me', {{credentials: 'include'}});
                 return {{status: r.status, body: await r.json()}};"
            ),
        );
        let csrf = me["body"]["csrfToken"].as_str().unwrap_or_default().to_owned();
        // A write without the CSRF header is refused; with it, it lands.
        let put = |csrf: Option<&str>| {
            let header = csrf
                .map(|c| format!(", 'x-snug-csrf': '{c}'"))
                .unwrap_or_default();
            run(
                &page,
                &format!(
                    "const image = await (await fetch('/image')).arrayBuffer();
                     const r = await fetch('{hub_url}/userdb', {{
                       method: 'PUT', credentials: 'include', body: image,
                       headers: {{'content-type': 'application/octet-stream',
                                  'if-none-match': '*'{header}}}}});
                     return {{status: r.status, sent: image.byteLength,
                              etag: r.headers.get('etag')}};"
                ),
            )
        };
        let refused = put(None);
        let pushed = put(Some(&csrf));

        // The same browser, the same session cookie, a page of an origin the hub does not list:
        // the browser withholds the answer (no CORS headers) and never sends the write (its
        // preflight is refused).
        let other = browser.open(&unlisted.url("/")).expect("open the stranger");
        let stranger = run(
            &other,
            &format!(
                "const out = {{}};
                 try {{ await fetch('{hub_url}/auth/me', {{credentials: 'include'}}); out.read = 'allowed'; }}
                 catch (e) {{ out.read = e.name; }}
                 try {{
                   const r = await fetch('{hub_url}/userdb', {{method: 'PUT', credentials: 'include',
                     body: new Uint8Array(16), headers: {{'content-type': 'application/octet-stream',
                     'if-none-match': '*', 'x-snug-csrf': '{csrf}'}}}});
                   out.write = r.status;
                 }} catch (e) {{ out.write = e.name; }}
                 return out;"
            ),
        );
        let writes_seen = unlisted.requests().len();
        (me, refused, pushed, (stranger, writes_seen))
    })
    .await
    .expect("browser steps");

    assert_eq!(me["status"], 200, "{me}");
    assert_eq!(me["body"]["via"], "session", "{me}");
    assert_eq!(me["body"]["name"], "alice@127.0.0.1", "{me}");
    assert!(me["body"]["csrfToken"].is_string(), "{me}");
    assert_eq!(refused["status"], 403, "{refused}");
    assert_eq!(pushed["status"], 204, "{pushed}");
    assert_eq!(pushed["sent"], image_len, "{pushed}");
    assert!(pushed["etag"].is_string(), "{pushed}");
    let (stranger, _) = stranger;
    assert_eq!(stranger["read"], "TypeError", "{stranger}");
    assert_eq!(stranger["write"], "TypeError", "{stranger}");

    // What the hub holds is the listed page's push, nothing of the stranger's: the user's
    // current image is exactly the pushed bytes, and the login provisioned one user.
    let users = hub.list_users();
    assert_eq!(users.len(), 1, "{users:?}");
    assert_eq!(users[0].user.name, "alice@127.0.0.1");
    assert_eq!(users[0].identities.len(), 1);
    let user: snug_revstore::UserId = users[0].user.id.parse().expect("user id");
    let head = snug_revstore::RevStore::head(hub.store(), &user)
        .await
        .expect("an image");
    assert_eq!(head.size, image_len as u64);
    assert!(!listed_origin.is_empty());
}
