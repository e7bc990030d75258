"""The split deployment (`SplitHub`): five containers on a network of their own, each service
reached on its own gRPC port, and the sync service stopped mid-suite: `PUT /userdb` is refused with the
documented 503 (SERVICE_UNAVAILABLE, retryable, Retry-After) and succeeds once it is back."""

from __future__ import annotations

import time

import docker
import grpc
import pytest

from snug_hub import ContainerClient, SchemaClient, errors
from snug_hub.pb import container_pb2
from snug_hub.testcontainers import LABEL, SERVICES, SplitHub
from support import vector


def test_each_service_runs_in_its_own_container_on_the_deployments_network(split: SplitHub) -> None:
    network = split.network.name
    assert network.startswith("snug-hub-")
    engine = docker.from_env()
    for service in SERVICES:
        attrs = split.container(service).get_wrapped_container().attrs
        assert attrs["Config"]["Cmd"] == ["serve", service]
        assert attrs["Config"]["Labels"][LABEL] == "1"
        assert list(attrs["NetworkSettings"]["Networks"]) == [network]
        assert attrs["HostConfig"]["ReadonlyRootfs"] is True
        published = [b for bindings in attrs["NetworkSettings"]["Ports"].values() for b in bindings or []]
        assert published and {b["HostIp"] for b in published} == {"127.0.0.1"}, published
    assert engine.networks.get(network).attrs["Labels"][LABEL] == "1"
    with pytest.raises(ValueError):
        split.grpc_target("gateway")


def test_each_service_answers_on_its_own_port(split: SplitHub) -> None:
    token = split.service_token
    with ContainerClient(split.grpc_target("container"), timeout=30, service_token=token) as container:
        assert container.detect_format(b"SNUGENC1\n\x01") == container_pb2.FORMAT_SNUGENC1
    with SchemaClient(split.grpc_target("schema"), timeout=30, service_token=token) as schema:
        assert schema.inspect(vector("userdb", "fresh-v6.user.snug")).storage_version == 6
    # The container service is not the schema service: an RPC it does not serve is typed too.
    with SchemaClient(split.grpc_target("container"), timeout=30, service_token=token) as wrong:
        with pytest.raises(errors.UnimplementedError):
            wrong.inspect(vector("userdb", "fresh-v6.user.snug"))


def test_every_service_refuses_a_call_without_the_service_token(split: SplitHub) -> None:
    for service, client in [("container", ContainerClient), ("schema", SchemaClient)]:
        for token in [None, "not-the-token-" + "0" * 32]:
            with client(split.grpc_target(service), timeout=30, service_token=token) as refused:
                with pytest.raises(errors.ServiceTokenRefused) as error:
                    if isinstance(refused, ContainerClient):
                        refused.detect_format(b"SNUGENC1\n\x01")
                    else:
                        refused.inspect(vector("userdb", "fresh-v6.user.snug"))
                assert error.value.code == grpc.StatusCode.UNAUTHENTICATED
                assert not error.value.retryable


def test_a_stopped_sync_service_gives_503_and_the_hub_recovers(split: SplitHub) -> None:
    userdb = split.userdb(split.add_user("fault"))
    first = userdb.put(vector("userdb", "fresh-v6.export.snug"), create=True)

    # The gateway calls no schema service: with it stopped a PUT is validated and stored.
    split.stop_service("schema")
    second = userdb.put(vector("userdb", "sample-v6.export.snug"), if_match=first)
    assert userdb.head().revision == second != first
    split.start_service("schema")

    split.stop_service("sync")
    started = time.monotonic()
    with pytest.raises(errors.ServiceUnavailable) as refused:
        userdb.put(vector("userdb", "fresh-v6.export.snug"), if_match=second)
    error = refused.value
    assert (error.http_status, error.http_code, error.retryable) == (503, "SERVICE_UNAVAILABLE", True)
    assert error.retry_after is not None and error.retry_after >= 1
    assert isinstance(error, errors.UnavailableError)
    assert time.monotonic() - started < 10, "refused promptly, not after a hang"

    split.start_service("sync")
    # The gateway reaches the service again on its next connection attempt; the revisions are
    # on the sync service's volume, so the PUT on the last one is accepted.
    deadline = time.monotonic() + 60
    while True:
        try:
            third = userdb.put(vector("userdb", "fresh-v6.export.snug"), if_match=second)
            break
        except errors.UnavailableError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.25)
    assert userdb.head().revision == third != second
