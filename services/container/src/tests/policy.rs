//! The iteration count as a policy matter over gRPC: ITERATIONS_OUT_OF_POLICY with the count and the range, and `iteration_policy` to open such a file on every RPC that reads one.

use super::*;

/// A server with the production range (10,000..=10,000,000), which a test file sealed at 1,000
/// iterations is outside of.
async fn strict() -> ContainerServiceClient<Channel> {
    start(ContainerConfig::default()).await
}

fn policy(min_iterations: u32, max_iterations: u32) -> Option<pb::IterationPolicy> {
    Some(pb::IterationPolicy {
        min_iterations,
        max_iterations,
    })
}

async fn unlock_with(
    client: &mut ContainerServiceClient<Channel>,
    container: Bytes,
    secrets: pb::Secrets,
    iteration_policy: Option<pb::IterationPolicy>,
) -> Result<Bytes, Status> {
    let header = pb::UnlockRequest::header(pb::UnlockHeader {
        secrets: Some(secrets),
        expected_length: None,
        iteration_policy,
    });
    let request = chunks::upload(header, container);
    let mut stream = client.unlock(request).await?.into_inner();
    let (_, bytes) = chunks::download(&mut stream, u64::MAX, |r| r.plaintext_length).await?;
    Ok(bytes)
}

async fn inspect_with(
    client: &mut ContainerServiceClient<Channel>,
    container: Bytes,
    iteration_policy: Option<pb::IterationPolicy>,
) -> Result<pb::InspectContainerResponse, Status> {
    let mut first = true;
    let messages: Vec<_> = chunks::split_into_chunks(container)
        .map(|chunk| pb::InspectContainerRequest {
            chunk,
            iteration_policy: if std::mem::take(&mut first) {
                iteration_policy
            } else {
                None
            },
        })
        .collect();
    client
        .inspect_container(futures::stream::iter(messages))
        .await
        .map(tonic::Response::into_inner)
}

#[track_caller]
fn assert_out_of_policy(status: &Status, iterations: u32, min: u32, max: u32) {
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert_eq!(
        reason(status),
        &snug_reasons::container::ITERATIONS_OUT_OF_POLICY
    );
    let metadata = |key| snug_rpc::status::metadata_of(status, key);
    assert_eq!(metadata("iterations"), Some(iterations.to_string()));
    assert_eq!(metadata("minIterations"), Some(min.to_string()));
    assert_eq!(metadata("maxIterations"), Some(max.to_string()));
}

#[tokio::test]
async fn a_weak_file_is_out_of_policy_and_opens_with_an_iteration_policy() {
    let (recovery_key, container) = protect(
        &mut start(test_config()).await,
        sqlite_bytes(300),
        PASSPHRASE,
    )
    .await
    .expect("protect");
    let mut client = strict().await;

    let status = unlock_with(
        &mut client,
        container.clone(),
        secrets(Some(PASSPHRASE), None),
        None,
    )
    .await
    .expect_err("out of policy");
    assert_out_of_policy(&status, ITERATIONS, 10_000, 10_000_000);
    // Judged before any secret: a wrong one gets the same answer, not LOCKED.
    let status = unlock_with(
        &mut client,
        container.clone(),
        secrets(Some("wrong"), None),
        None,
    )
    .await
    .expect_err("out of policy");
    assert_out_of_policy(&status, ITERATIONS, 10_000, 10_000_000);
    let status = inspect_with(&mut client, container.clone(), None)
        .await
        .expect_err("out of policy");
    assert_out_of_policy(&status, ITERATIONS, 10_000, 10_000_000);

    let lowered = policy(ITERATIONS, 0);
    let plaintext = unlock_with(
        &mut client,
        container.clone(),
        secrets(None, Some(&recovery_key)),
        lowered,
    )
    .await
    .expect("opens with the policy");
    assert_eq!(plaintext, sqlite_bytes(300));
    let info = inspect_with(&mut client, container.clone(), lowered)
        .await
        .expect("inspects with the policy");
    assert_eq!(info.iterations, ITERATIONS);

    // RemoveProtection, ChangePassphrase and RotateRecoveryKey honour it too.
    let header = pb::RemoveProtectionRequest::header(pb::RemoveProtectionHeader {
        secrets: Some(secrets(Some(PASSPHRASE), None)),
        expected_length: None,
        iteration_policy: lowered,
    });
    let request = chunks::upload(header, container.clone());
    assert!(client.remove_protection(request).await.is_ok());
    for iteration_policy in [None, lowered] {
        let header = pb::ChangePassphraseRequest::header(pb::ChangePassphraseHeader {
            current_passphrase: PASSPHRASE.to_owned(),
            new_passphrase: "another".to_owned(),
            expected_length: None,
            iteration_policy,
        });
        let request = chunks::upload(header, container.clone());
        let result = client.change_passphrase(request).await;
        match iteration_policy {
            None => assert_out_of_policy(
                &result.expect_err("out of policy"),
                ITERATIONS,
                10_000,
                10_000_000,
            ),
            Some(_) => assert!(result.is_ok()),
        }
        let header = pb::RotateRecoveryKeyRequest::header(pb::RotateRecoveryKeyHeader {
            secrets: Some(secrets(Some(PASSPHRASE), None)),
            expected_length: None,
            iteration_policy,
            new_recovery_key: None,
        });
        let request = chunks::upload(header, container.clone());
        let result = client.rotate_recovery_key(request).await;
        match iteration_policy {
            None => assert_out_of_policy(
                &result.expect_err("out of policy"),
                ITERATIONS,
                10_000,
                10_000_000,
            ),
            Some(_) => assert!(result.is_ok()),
        }
    }
}

#[tokio::test]
async fn a_raised_file_opens_up_to_the_ceiling_and_zero_stays_corrupt() {
    let mut client = start(test_config()).await;
    let (_, container) = protect(&mut client, sqlite_bytes(100), PASSPHRASE)
        .await
        .expect("protect");
    let with_count = |iterations: u32| {
        let mut patched = container.to_vec();
        patched[12..16].copy_from_slice(&iterations.to_be_bytes());
        let checksum = snug_container::header_checksum(&patched[..160]);
        patched[34..38].copy_from_slice(&checksum.to_be_bytes());
        Bytes::from(patched)
    };

    // Above the maximum: out of policy, inspectable once the maximum is raised.
    let raised = with_count(20_000_000);
    let status = inspect_with(&mut client, raised.clone(), None)
        .await
        .expect_err("out of policy");
    assert_out_of_policy(&status, 20_000_000, ITERATIONS, 10_000_000);
    let info = inspect_with(&mut client, raised.clone(), policy(0, 20_000_000))
        .await
        .expect("inspects");
    assert_eq!(info.iterations, 20_000_000);

    // A maximum over the server's ceiling is refused as a bad request, before any derivation.
    let status = inspect_with(&mut client, raised.clone(), policy(0, u32::MAX))
        .await
        .expect_err("over the ceiling");
    assert_eq!(reason(&status), &snug_reasons::container::INVALID_ARGUMENT);
    assert_eq!(
        snug_rpc::status::metadata_of(&status, "field").as_deref(),
        Some("iteration_policy.max_iterations")
    );
    let status = unlock_with(
        &mut client,
        raised,
        secrets(Some(PASSPHRASE), None),
        policy(0, DEFAULT_ITERATIONS_CEILING + 1),
    )
    .await
    .expect_err("over the ceiling");
    assert_eq!(reason(&status), &snug_reasons::container::INVALID_ARGUMENT);
    // An empty range is a bad request too.
    let status = inspect_with(&mut client, container.clone(), policy(5_000, 2_000))
        .await
        .expect_err("empty range");
    assert_eq!(reason(&status), &snug_reasons::container::INVALID_ARGUMENT);

    // Zero iterations is damage whatever the policy.
    let zero = with_count(0);
    for iteration_policy in [None, policy(1, 0)] {
        let status = unlock_with(
            &mut client,
            zero.clone(),
            secrets(Some(PASSPHRASE), None),
            iteration_policy,
        )
        .await
        .expect_err("corrupt");
        assert_eq!(reason(&status), &snug_reasons::container::CORRUPT);
        assert_eq!(
            snug_rpc::status::metadata_of(&status, "detail").as_deref(),
            Some("zero_iterations")
        );
    }
}
