"""The client of `snug.container.v1.ContainerService`: the SNUGENC1 passphrase-protected file.

Every method streams its input up in chunks (a path, a binary file or bytes) and its output
down into a sink (a path, written atomically, or a binary file); results are the protos'
result messages. Failures raise `snug_hub.errors` classes: a wrong secret is `Locked`, a damaged
file `Corrupt`, and so on (container.proto's reason table).
"""

from __future__ import annotations

from collections.abc import Iterator

from snug_hub._channel import ServiceClient
from snug_hub._proto.snug.container.v1 import container_pb2 as pb
from snug_hub._proto.snug.container.v1 import container_pb2_grpc
from snug_hub._streams import Requests, Sink, Source, framed, read_chunks, receive, rpc, source_length

#: The PBKDF2 iteration range one request accepts, e.g. ``IterationPolicy(min_iterations=1000)``.
IterationPolicy = pb.IterationPolicy
#: What a file's leading bytes are (`ContainerClient.detect_format`).
Format = pb.Format


def secrets(passphrase: str | None = None, recovery_key: str | None = None) -> pb.Secrets:
    """Returns the `Secrets` message holding whichever of the two secrets is given."""
    message = pb.Secrets()
    if passphrase is not None:
        message.passphrase = passphrase
    if recovery_key is not None:
        message.recovery_key = recovery_key
    return message


class ContainerClient(ServiceClient):
    """Protects, opens and re-keys SNUGENC1 containers through a hub's container service."""

    def _stub(self) -> container_pb2_grpc.ContainerServiceStub:
        return container_pb2_grpc.ContainerServiceStub(self.channel)

    def detect_format(self, leading_bytes: bytes) -> pb.Format:
        """Returns what a file is from its first bytes (16 are enough): FORMAT_SQLITE,
        FORMAT_SNUGENC1 or FORMAT_UNKNOWN."""
        request = pb.DetectFormatRequest(leading_bytes=leading_bytes[:64])
        with rpc():
            response: pb.DetectFormatResponse = self._stub().DetectFormat(
                request, timeout=self.timeout
            )
        return response.format

    def inspect(
        self, container: Source, *, iteration_policy: pb.IterationPolicy | None = None
    ) -> pb.InspectContainerResponse:
        """Reads a container's header without any secret and checks its structure."""

        def messages() -> Iterator[pb.InspectContainerRequest]:
            first = True
            for piece in read_chunks(container, self.chunk_size):
                request = pb.InspectContainerRequest(chunk=piece)
                if first and iteration_policy is not None:
                    request.iteration_policy.CopyFrom(iteration_policy)
                first = False
                yield request
            if first:
                yield pb.InspectContainerRequest(iteration_policy=iteration_policy)

        requests = Requests(messages())
        with rpc(requests):
            response: pb.InspectContainerResponse = self._stub().InspectContainer(
                requests, timeout=self.timeout
            )
        return response

    def protect(
        self,
        plaintext: Source,
        out: Sink,
        *,
        passphrase: str,
        custody_rule_acknowledged: bool,
        iterations: int = 0,
    ) -> pb.ProtectResult:
        """Protects a plain user database under `passphrase` and a newly generated recovery
        key, writes the container to `out` and returns the recovery key (shown to the user once;
        the hub keeps no copy).

        `custody_rule_acknowledged` must be True: the caller confirms it told the user there is
        no escrow and no reset (§11.3). `iterations` 0 is the default, 600,000.
        """
        header = pb.ProtectHeader(
            passphrase=passphrase,
            iterations=iterations,
            custody_rule_acknowledged=custody_rule_acknowledged,
            expected_length=source_length(plaintext),
        )
        requests = Requests(
            framed(
                pb.ProtectRequest(header=header),
                lambda piece: pb.ProtectRequest(chunk=piece),
                [plaintext],
                self.chunk_size,
            )
        )
        with rpc(requests):
            result: pb.ProtectResult = receive(
                self._stub().Protect(requests, timeout=self.timeout),
                out,
                lambda answer: answer.container_length,
            )
        return result

    def unlock(
        self,
        container: Source,
        out: Sink,
        *,
        passphrase: str | None = None,
        recovery_key: str | None = None,
        iteration_policy: pb.IterationPolicy | None = None,
    ) -> pb.UnlockResult:
        """Opens a container with a passphrase or a recovery key (each is tried only against
        its own kind of slot) and writes the plaintext to `out`. A wrong secret raises
        `Locked`; the container is healthy and untouched."""
        header = pb.UnlockHeader(
            secrets=secrets(passphrase, recovery_key),
            expected_length=source_length(container),
            iteration_policy=iteration_policy,
        )
        requests = Requests(
            framed(
                pb.UnlockRequest(header=header),
                lambda piece: pb.UnlockRequest(chunk=piece),
                [container],
                self.chunk_size,
            )
        )
        with rpc(requests):
            result: pb.UnlockResult = receive(
                self._stub().Unlock(requests, timeout=self.timeout),
                out,
                lambda answer: answer.plaintext_length,
            )
        return result

    def change_passphrase(
        self,
        container: Source,
        out: Sink,
        *,
        current_passphrase: str,
        new_passphrase: str,
        iteration_policy: pb.IterationPolicy | None = None,
    ) -> pb.ChangePassphraseResult:
        """Re-wraps the passphrase slot under `new_passphrase` and writes the container to
        `out`; the payload and the recovery slot are unchanged."""
        header = pb.ChangePassphraseHeader(
            current_passphrase=current_passphrase,
            new_passphrase=new_passphrase,
            expected_length=source_length(container),
            iteration_policy=iteration_policy,
        )
        requests = Requests(
            framed(
                pb.ChangePassphraseRequest(header=header),
                lambda piece: pb.ChangePassphraseRequest(chunk=piece),
                [container],
                self.chunk_size,
            )
        )
        with rpc(requests):
            result: pb.ChangePassphraseResult = receive(
                self._stub().ChangePassphrase(requests, timeout=self.timeout),
                out,
                lambda answer: answer.container_length,
            )
        return result

    def rotate_recovery_key(
        self,
        container: Source,
        out: Sink,
        *,
        passphrase: str | None = None,
        recovery_key: str | None = None,
        new_recovery_key: str | None = None,
        iteration_policy: pb.IterationPolicy | None = None,
    ) -> pb.RotateRecoveryKeyResult:
        """Replaces the recovery key (a generated one, or `new_recovery_key` at full strength)
        and writes the container to `out`; the result carries the new key, shown once."""
        header = pb.RotateRecoveryKeyHeader(
            secrets=secrets(passphrase, recovery_key),
            expected_length=source_length(container),
            iteration_policy=iteration_policy,
            new_recovery_key=new_recovery_key,
        )
        requests = Requests(
            framed(
                pb.RotateRecoveryKeyRequest(header=header),
                lambda piece: pb.RotateRecoveryKeyRequest(chunk=piece),
                [container],
                self.chunk_size,
            )
        )
        with rpc(requests):
            result: pb.RotateRecoveryKeyResult = receive(
                self._stub().RotateRecoveryKey(requests, timeout=self.timeout),
                out,
                lambda answer: answer.container_length,
            )
        return result

    def remove_protection(
        self,
        container: Source,
        out: Sink,
        *,
        passphrase: str | None = None,
        recovery_key: str | None = None,
        iteration_policy: pb.IterationPolicy | None = None,
    ) -> pb.RemoveProtectionResult:
        """Removes protection: writes the plain user database the container carries to `out`."""
        header = pb.RemoveProtectionHeader(
            secrets=secrets(passphrase, recovery_key),
            expected_length=source_length(container),
            iteration_policy=iteration_policy,
        )
        requests = Requests(
            framed(
                pb.RemoveProtectionRequest(header=header),
                lambda piece: pb.RemoveProtectionRequest(chunk=piece),
                [container],
                self.chunk_size,
            )
        )
        with rpc(requests):
            result: pb.RemoveProtectionResult = receive(
                self._stub().RemoveProtection(requests, timeout=self.timeout),
                out,
                lambda answer: answer.plaintext_length,
            )
        return result

    def reseal(
        self,
        container: Source,
        plaintext: Source,
        out: Sink,
        *,
        passphrase: str | None = None,
        recovery_key: str | None = None,
        iteration_policy: pb.IterationPolicy | None = None,
    ) -> pb.ResealResult:
        """Writes a new plaintext into a protected file, keeping its header, salt and slots, so
        every secret that opened it opens the result; writes the container to `out`.

        The container's length must be known up front: a container given as an unseekable
        file object is read into memory first.
        """
        container_length = source_length(container)
        if container_length is None:
            container = b"".join(read_chunks(container, self.chunk_size))
            container_length = len(container)
        header = pb.ResealHeader(
            secrets=secrets(passphrase, recovery_key),
            container_length=container_length,
            plaintext_length=source_length(plaintext),
            iteration_policy=iteration_policy,
        )
        requests = Requests(
            framed(
                pb.ResealRequest(header=header),
                lambda piece: pb.ResealRequest(chunk=piece),
                [container, plaintext],
                self.chunk_size,
            )
        )
        with rpc(requests):
            result: pb.ResealResult = receive(
                self._stub().Reseal(requests, timeout=self.timeout),
                out,
                lambda answer: answer.container_length,
            )
        return result
