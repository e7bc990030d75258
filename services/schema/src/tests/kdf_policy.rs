//! CheckImport and a container whose KDF iteration count is outside the accepted range: ITERATIONS_OUT_OF_POLICY with the count and the range, never CORRUPT_CONTAINER.

use super::*;

#[tokio::test]
async fn check_import_reports_a_weak_container_as_out_of_policy_not_damaged() {
    let mut client = client().await;
    // The reference's deterministic vector, sealed at 1,000 iterations.
    let weak = vector("containers/c03-deterministic-1000iter.snug");
    for secrets in [secrets(Some(PASSPHRASE)), secrets(Some("wrong"))] {
        let status = check_import(&mut client, weak.clone(), secrets, false)
            .await
            .expect_err("out of policy");
        assert_refused(
            &status,
            Code::InvalidArgument,
            &snug_reasons::schema::ITERATIONS_OUT_OF_POLICY,
        );
        assert_eq!(metadata(&status, "iterations").as_deref(), Some("1000"));
        assert_eq!(metadata(&status, "minIterations").as_deref(), Some("10000"));
        assert_eq!(
            metadata(&status, "maxIterations").as_deref(),
            Some("10000000")
        );
    }
    // Zero iterations stays damage.
    let mut zero = weak.to_vec();
    zero[12..16].copy_from_slice(&[0; 4]);
    let checksum = snug_container::header_checksum(&zero[..160]);
    zero[34..38].copy_from_slice(&checksum.to_be_bytes());
    let status = check_import(
        &mut client,
        Bytes::from(zero),
        secrets(Some(PASSPHRASE)),
        false,
    )
    .await
    .expect_err("corrupt");
    assert_refused(
        &status,
        Code::InvalidArgument,
        &snug_reasons::schema::CORRUPT_CONTAINER,
    );
    assert_eq!(
        metadata(&status, "detail").as_deref(),
        Some("zero_iterations")
    );
}
