//! RotateRecoveryKey with a caller-supplied key (issue #17 point 10, §11.2 rule 3): accepted only at full strength; a legacy-length key is WEAK_RECOVERY_KEY and a malformed one INVALID_ARGUMENT, the container unchanged and the old key still opening it.

use super::*;

async fn rotate_to(
    client: &mut ContainerServiceClient<Channel>,
    container: &Bytes,
    new_recovery_key: &str,
) -> Result<(pb::RotateRecoveryKeyResult, Bytes), Status> {
    let header = pb::RotateRecoveryKeyRequest::header(pb::RotateRecoveryKeyHeader {
        secrets: Some(secrets(Some(PASSPHRASE), None)),
        expected_length: None,
        iteration_policy: None,
        new_recovery_key: Some(new_recovery_key.to_owned()),
    });
    let request = chunks::upload(header, container.clone());
    let mut stream = client.rotate_recovery_key(request).await?.into_inner();
    chunks::download(&mut stream, u64::MAX, |r| r.container_length).await
}

#[tokio::test]
async fn a_supplied_recovery_key_is_accepted_only_at_full_strength() {
    let mut client = start(test_config()).await;
    let plaintext = sqlite_bytes(3000);
    let (old_key, container) = protect(&mut client, plaintext.clone(), PASSPHRASE)
        .await
        .expect("protect");
    let generated = snug_container::RecoveryKey::generate().grouped();
    let weak = &generated.replace('-', "")[..26];
    let cases: &[(&str, &snug_reasons::Reason, Code)] = &[
        (
            weak,
            &snug_reasons::container::WEAK_RECOVERY_KEY,
            Code::InvalidArgument,
        ),
        (
            "too short",
            &snug_reasons::container::INVALID_ARGUMENT,
            Code::InvalidArgument,
        ),
        (
            "",
            &snug_reasons::container::INVALID_ARGUMENT,
            Code::InvalidArgument,
        ),
        (
            // 27 symbols, but `0`, `1` and `I` are outside the alphabet.
            "000000000111111111IIIIIIIII",
            &snug_reasons::container::INVALID_ARGUMENT,
            Code::InvalidArgument,
        ),
    ];
    for (key, expected, code) in cases {
        let status = rotate_to(&mut client, &container, key)
            .await
            .expect_err("refused");
        assert_eq!(status.code(), *code, "{key:?}: {status:?}");
        assert_eq!(reason(&status), *expected, "{key:?}");
    }
    // The old key still opens the container the client holds.
    let (_, bytes) = unlock(
        &mut client,
        container.clone(),
        secrets(None, Some(&old_key)),
    )
    .await
    .expect("old key");
    assert_eq!(bytes, plaintext);

    // Full strength, given lower-case and ungrouped: normalised, and it opens the result.
    let chosen = generated.replace('-', "").to_lowercase();
    let (result, rotated) = rotate_to(&mut client, &container, &chosen)
        .await
        .expect("rotated");
    assert_eq!(result.recovery_key, generated, "the key given, grouped");
    let (_, bytes) = unlock(&mut client, rotated.clone(), secrets(None, Some(&chosen)))
        .await
        .expect("chosen key");
    assert_eq!(bytes, plaintext);
    let status = unlock(&mut client, rotated, secrets(None, Some(&old_key)))
        .await
        .expect_err("old key");
    assert_eq!(reason(&status), &snug_reasons::container::LOCKED);
}
