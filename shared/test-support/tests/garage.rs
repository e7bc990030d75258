//! The Garage harness against a real Garage: the node it starts takes a SigV4-signed PUT from its
//! key and serves the object back, refuses unsigned requests, stops answering when stopped, and
//! has the same bucket and object after a start over its data.
//!
//! Skips (visibly) without a `garage` binary unless `SNUG_REQUIRE_GARAGE=1` (`.ci/run`). The
//! SigV4 signer below exists for this check alone: the store's tests use a real S3 client.

use std::{
    net::TcpStream,
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use hmac::{KeyInit as _, Mac as _};
use sha2::{Digest as _, Sha256};
use snug_test_support::garage::Garage;

type HmacSha256 = hmac::Hmac<Sha256>;

#[test]
fn a_garage_node_serves_its_bucket_and_keeps_it_across_a_crash() {
    let started = Instant::now();
    let Some(mut garage) = Garage::start_if_available() else {
        return;
    };
    let launched = started.elapsed();
    let key = "/snug-test/chunks/0001";
    let body = b"twelve bytes".repeat(1000);

    let put = request(&garage, "PUT", key, Some(&body), Signature::Valid);
    assert_eq!(put.0, 200, "PUT answered {put:?}; log:\n{}", garage.log());
    assert_eq!(
        request(&garage, "GET", key, None, Signature::Valid),
        (200, body.clone())
    );
    // Authentication is on: no signature, or one made with another secret, is refused.
    assert_eq!(request(&garage, "GET", key, None, Signature::None).0, 403);
    assert_eq!(
        request(&garage, "GET", key, None, Signature::WrongSecret).0,
        403
    );

    garage.stop();
    assert!(!garage.is_running());
    assert!(
        TcpStream::connect_timeout(&garage.s3_addr(), Duration::from_secs(1)).is_err(),
        "a stopped node still accepts connections on {}",
        garage.s3_addr()
    );

    let restart = Instant::now();
    garage.start();
    let restarted = restart.elapsed();
    assert_eq!(
        request(&garage, "GET", key, None, Signature::Valid),
        (200, body),
        "the object after a restart"
    );
    let info = garage.cli(&["bucket", "info", garage.bucket()]);
    let stdout = String::from_utf8_lossy(&info.stdout);
    assert!(
        info.status.success() && stdout.contains(garage.access_key_id()),
        "garage bucket info: {info:?}"
    );
    eprintln!("garage: launched in {launched:?}, restarted in {restarted:?}");
}

/// How a test request is signed.
#[derive(Clone, Copy, Debug)]
enum Signature {
    Valid,
    WrongSecret,
    None,
}

/// Sends `method path` (path-style, `/BUCKET/KEY`) to the node and returns the status and body.
fn request(
    garage: &Garage,
    method: &str,
    path: &str,
    body: Option<&[u8]>,
    signature: Signature,
) -> (u16, Vec<u8>) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(10)))
        .build()
        .into();
    let url = format!("{}{path}", garage.endpoint());
    let mut builder = ureq::http::Request::builder().method(method).uri(&url);
    let secret = match signature {
        Signature::Valid => Some(garage.secret_access_key().to_owned()),
        Signature::WrongSecret => Some("0".repeat(64)),
        Signature::None => None,
    };
    if let Some(secret) = secret {
        for (name, value) in sign(garage, method, path, &secret) {
            builder = builder.header(name, value);
        }
    }
    let request = builder
        .body(body.unwrap_or_default().to_vec())
        .expect("request");
    let mut response = agent.run(request).expect("the node answers");
    let status = response.status().as_u16();
    let bytes = response
        .body_mut()
        .with_config()
        .limit(16 << 20)
        .read_to_vec()
        .expect("read the body");
    (status, bytes)
}

/// AWS Signature Version 4 headers for a request without a query string and with an unsigned
/// payload (`x-amz-content-sha256: UNSIGNED-PAYLOAD`, which S3 allows).
fn sign(garage: &Garage, method: &str, path: &str, secret: &str) -> Vec<(&'static str, String)> {
    let (date, time) = utc_now();
    let amz_date = format!("{date}T{time}Z");
    let host = garage.s3_addr().to_string();
    let payload = "UNSIGNED-PAYLOAD";
    let signed_headers = "host;x-amz-content-sha256;x-amz-date";
    let canonical = format!(
        "{method}\n{path}\n\nhost:{host}\nx-amz-content-sha256:{payload}\nx-amz-date:{amz_date}\n\n{signed_headers}\n{payload}"
    );
    let scope = format!("{date}/{}/s3/aws4_request", garage.region());
    let to_sign = format!(
        "AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{}",
        hex::encode(Sha256::digest(canonical.as_bytes()))
    );
    let mut key = hmac(format!("AWS4{secret}").as_bytes(), date.as_bytes());
    for part in [garage.region(), "s3", "aws4_request"] {
        key = hmac(&key, part.as_bytes());
    }
    let signature = hex::encode(hmac(&key, to_sign.as_bytes()));
    vec![
        ("x-amz-date", amz_date),
        ("x-amz-content-sha256", payload.to_owned()),
        (
            "authorization",
            format!(
                "AWS4-HMAC-SHA256 Credential={}/{scope}, SignedHeaders={signed_headers}, Signature={signature}",
                garage.access_key_id()
            ),
        ),
    ]
}

fn hmac(key: &[u8], data: &[u8]) -> Vec<u8> {
    let mut mac = HmacSha256::new_from_slice(key).expect("HMAC accepts any key length");
    mac.update(data);
    mac.finalize().into_bytes().to_vec()
}

/// Today's UTC date as `YYYYMMDD` and the time as `HHMMSS` (the civil calendar from days since
/// the epoch: Howard Hinnant's `civil_from_days`).
fn utc_now() -> (String, String) {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_secs();
    let (days, rest) = (secs / 86_400, secs % 86_400);
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (
        format!("{year:04}{month:02}{day:02}"),
        format!("{:02}{:02}{:02}", rest / 3600, rest % 3600 / 60, rest % 60),
    )
}
