"""Snug Hub in Docker for test suites, through testcontainers (the PyPI package, 4.x).

The Python counterpart of the workspace's Rust `snug-testcontainers` crate, starting the same
image the same way:

- `SnugHub` runs ``snug-hub serve``: every gRPC service and the HTTP gateway in one container.
- `SplitHub` runs the container, schema, materialize and sync services and the gateway as five
  containers on a Docker network of their own, the gateway reaching the services by name; one
  service can be stopped and started again (`SplitHub.stop_service`, `SplitHub.start_service`)
  for fault tests, and the sync service keeps its revisions on its volume across a restart.

Every container runs as the image's non-root user (65532) with a read-only root filesystem,
every capability dropped and ``no-new-privileges``; its data is on the image's ``/data``
volume, removed with it. Ports are published on 127.0.0.1 only. A container is ready when the
image's HEALTHCHECK (``snug-hub healthcheck``) passes, probed every half second. Authentication
is on: users come from the image's own ``snug-hub users add`` (`add_user` returns the token).

The image is ``$SNUG_HUB_IMAGE``, default ``snug-hub:dev`` (build it from a checkout with
``bash deploy/build-image.sh snug-hub:dev``). Images are never pulled: a missing one is an
`ImageMissing` error. Every container and network carries the label `LABEL` and a name starting
with ``snug-hub-``, so what a killed run left behind can be found and removed
(``docker rm -f $(docker ps -aq --filter label=org.snug-hub.testcontainers)``). testcontainers'
reaper (Ryuk) needs an image from a registry; it stays off unless
``TESTCONTAINERS_RYUK_DISABLED`` says otherwise.

    from snug_hub.testcontainers import SnugHub

    with SnugHub() as hub:
        token = hub.add_user("alice")
        userdb = hub.userdb(token)          # UserDbClient on hub.http_url()
        client = hub.client()               # HubClient on hub.grpc_target()
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from types import TracebackType
from typing import Any, Literal, cast

import docker.errors
from testcontainers.core.config import testcontainers_config
from testcontainers.core.container import DockerContainer
from testcontainers.core.network import Network
from testcontainers.core.waiting_utils import WaitStrategy, WaitStrategyTarget
from typing_extensions import Self

from snug_hub import HubClient
from snug_hub.userdb import UserDbClient

__all__ = [
    "DEFAULT_IMAGE",
    "GRPC_PORT",
    "HTTP_PORT",
    "IMAGE_ENV",
    "LABEL",
    "SERVICES",
    "HubContainer",
    "ImageMissing",
    "Service",
    "SnugHub",
    "SplitHub",
    "hub_image",
]

#: The label on every container and network this module starts.
LABEL = "org.snug-hub.testcontainers"
#: The environment variable naming the image (``name:tag``).
IMAGE_ENV = "SNUG_HUB_IMAGE"

# What a test deployment changes from the image's defaults: no rate limits (on by default
# with auth on, as in every container), since a test suite sends its bursts from one address.
_TEST_DEFAULTS: Mapping[str, str] = {"SNUG_RATE_LIMIT_BURST": "0"}
#: The image used when `IMAGE_ENV` is unset.
DEFAULT_IMAGE = "snug-hub:dev"
#: The gRPC port every service listens on inside its container.
GRPC_PORT = 50051
#: The gateway's HTTP port inside its container.
HTTP_PORT = 8080

#: One container of a split deployment: what ``snug-hub serve <service>`` runs.
Service = Literal["container", "schema", "materialize", "sync", "gateway"]
#: Every service, the gateway last.
SERVICES: tuple[Service, ...] = ("container", "schema", "materialize", "sync", "gateway")

_DEFAULT_ORIGINS = ("https://app.example",)
# The image's HEALTHCHECK command, probed at a test-friendly cadence: every half second rather
# than every ten, and patient enough that a slow first start is not declared unhealthy.
_PROBE = ["/snug-hub", "healthcheck"]


class ImageMissing(LookupError):
    """The hub's image is not in the local Docker Engine (nothing is ever pulled)."""


def hub_image() -> str:
    """The image to run: ``$SNUG_HUB_IMAGE``, else ``snug-hub:dev``."""
    return os.environ.get(IMAGE_ENV, "").strip() or DEFAULT_IMAGE


def _no_reaper_unless_asked() -> None:
    # Ryuk is an image from Docker Hub; these suites run where no image can be pulled, and
    # clean up by label instead (as the Rust crate does, which has no reaper either).
    asked = os.environ.get("TESTCONTAINERS_RYUK_DISABLED") is not None
    if not asked and "ryuk.disabled" not in testcontainers_config.tc_properties:
        testcontainers_config.ryuk_disabled = True


def _grpc_on_network(service_token: str) -> dict[str, str]:
    """The gRPC services on the container's network (the image keeps them on loopback), each
    requiring the deployment's service token, which the gateway presents too."""
    return {"SNUG_LISTEN": f"0.0.0.0:{GRPC_PORT}", "SNUG_SERVICE_TOKEN": service_token}


def _deployment_id() -> str:
    return f"{os.getpid():x}-{secrets.token_hex(4)}"


class _Healthy(WaitStrategy):
    """Ready when Docker reports the image's HEALTHCHECK healthy; fails at once when the
    container exits or turns unhealthy, with its logs."""

    def wait_until_ready(self, container: WaitStrategyTarget) -> None:
        started = time.monotonic()
        wrapped = container.get_wrapped_container()
        while True:
            wrapped.reload()
            state = wrapped.attrs.get("State", {})
            health = (state.get("Health") or {}).get("Status")
            if health == "healthy":
                return
            if state.get("Status") in ("exited", "dead") or health == "unhealthy":
                raise RuntimeError(
                    f"{wrapped.name} is {state.get('Status')}, health {health}:\n"
                    + _logs(container)
                )
            if time.monotonic() - started > self._startup_timeout:
                raise TimeoutError(
                    f"{wrapped.name} did not become healthy within {self._startup_timeout} s "
                    f"(health {health}):\n" + _logs(container)
                )
            time.sleep(0.2)


def _logs(container: WaitStrategyTarget) -> str:
    stdout, stderr = container.get_logs()
    return (stdout + stderr).decode(errors="replace")


class HubContainer(DockerContainer):
    """One container of the hub's image, hardened and labelled as every container of this
    module is: non-root, read-only root, no capabilities, ports on 127.0.0.1 only."""

    def __init__(
        self,
        image: str,
        command: Sequence[str],
        *,
        name: str,
        env: Mapping[str, str],
        ports: Sequence[int],
        startup_timeout: float,
        network: Network | None = None,
    ) -> None:
        super().__init__(image, env=dict(env), name=name, network=network)
        self.with_command(list(command))
        self.startup_timeout = startup_timeout
        # testcontainers types host bindings as ports, but docker-py takes (host_ip,) too: a
        # port Docker picks, on loopback only.
        bindings = cast(dict[str, Any], self.ports)
        for port in ports:
            bindings[f"{port}/tcp"] = ("127.0.0.1",)
        self.with_kwargs(
            labels={LABEL: "1"},
            read_only=True,
            cap_drop=["ALL"],
            security_opt=["no-new-privileges"],
            healthcheck={
                "interval": 500_000_000,
                "timeout": 4_000_000_000,
                "retries": 20,
                "start_period": int(startup_timeout * 1e9),
            },
        )
        self.waiting_for(_Healthy().with_startup_timeout(int(startup_timeout)))

    def start(self) -> Self:
        """Creates and starts the container, then waits until its health check passes."""
        _no_reaper_unless_asked()
        try:
            self.get_docker_client().client.images.get(self.image)
        except docker.errors.ImageNotFound:
            raise ImageMissing(
                f"no image {self.image} in the local Docker Engine (nothing is pulled): build it "
                f"with `bash deploy/build-image.sh {self.image}` from a Snug Hub checkout, or "
                f"name an existing one in {IMAGE_ENV}"
            ) from None
        super().start()
        return self

    def host_port(self, port: int) -> int:
        """The port on 127.0.0.1 that Docker published `port` on; it changes when the
        container is started again."""
        container_id = self.get_container_id()
        bindings = self.get_docker_client().client.api.port(container_id, port) or []
        for binding in bindings:
            if binding.get("HostIp") == "127.0.0.1" and binding.get("HostPort"):
                return int(binding["HostPort"])
        raise RuntimeError(f"{self._name} publishes no port for {port} (is it running?)")

    def exec_hub(self, *args: str) -> tuple[int, str, str]:
        """Runs ``/snug-hub ARGS...`` inside the container (the image has no shell) and returns
        its exit code, stdout and stderr."""
        result = self.get_wrapped_container().exec_run(["/snug-hub", *args], demux=True)
        stdout, stderr = result.output
        return (
            int(result.exit_code),
            (stdout or b"").decode(errors="replace"),
            (stderr or b"").decode(errors="replace"),
        )

    def add_user(self, name: str) -> str:
        """Adds a user with the image's ``snug-hub users add`` and returns their bearer token."""
        code, stdout, stderr = self.exec_hub("users", "add", name)
        token = stdout.strip()
        if code != 0 or not token or any(c.isspace() for c in token):
            raise RuntimeError(f"`snug-hub users add {name}` in {self._name} exited {code}: {stderr}")
        return token

    def wait_healthy(self) -> None:
        """Runs the image's health probe inside the container until it passes (after a
        restart, when Docker's own status may still be the old one)."""
        deadline = time.monotonic() + self.startup_timeout
        last = ""
        while time.monotonic() < deadline:
            try:
                code, stdout, stderr = self.exec_hub(*_PROBE[1:])
            except docker.errors.APIError as err:
                last = str(err)
            else:
                if code == 0:
                    return
                last = stdout + stderr
            time.sleep(0.2)
        raise TimeoutError(f"{self._name} did not become healthy within {self.startup_timeout} s: {last}")

    def logs(self) -> str:
        """Everything the container printed so far."""
        return _logs(self)

    @property
    def name(self) -> str:
        """The container's name (on a split deployment's network, also its host name)."""
        return self._name or ""


class SnugHub(HubContainer):
    """``snug-hub serve`` in one container: every gRPC service on one port, and the gateway.

        with SnugHub() as hub:
            token = hub.add_user("alice")
            hub.userdb(token).put(image, create=True)
    """

    def __init__(
        self,
        image: str | None = None,
        *,
        cors_origins: Sequence[str] = _DEFAULT_ORIGINS,
        env: Mapping[str, str] | None = None,
        startup_timeout: float = 60.0,
    ) -> None:
        """Args:
        image: ``name:tag``; default `hub_image()`.
        cors_origins: Browser origins the gateway allows (``SNUG_CORS_ORIGINS``); a container
            has authentication on, and the gateway refuses to start without one.
        env: Extra environment (e.g. ``SNUG_SYNC_QUOTA_BYTES``). Rate limits are off
            (``SNUG_RATE_LIMIT_BURST=0``), since a test suite sends bursts from one address,
            unless `env` sets them.
        startup_timeout: Seconds the container may take to become healthy.
        """
        #: The token the hub's gRPC services require (``SNUG_SERVICE_TOKEN``); `client()`
        #: presents it.
        self.service_token = secrets.token_hex(32)
        environment = {
            **_TEST_DEFAULTS,
            **_grpc_on_network(self.service_token),
            **(env or {}),
            "SNUG_CORS_ORIGINS": ",".join(cors_origins),
        }
        super().__init__(
            image or hub_image(),
            ["serve"],
            name=f"snug-hub-{_deployment_id()}",
            env=environment,
            ports=[GRPC_PORT, HTTP_PORT],
            startup_timeout=startup_timeout,
        )

    def http_url(self) -> str:
        """The gateway's base URL, e.g. ``http://127.0.0.1:49154``."""
        return f"http://127.0.0.1:{self.host_port(HTTP_PORT)}"

    def grpc_target(self) -> str:
        """The gRPC target of every service, e.g. ``127.0.0.1:49153``."""
        return f"127.0.0.1:{self.host_port(GRPC_PORT)}"

    def userdb(self, token: str, *, timeout: float | None = 60.0) -> UserDbClient:
        """A `UserDbClient` for the user whose bearer token is `token`."""
        return UserDbClient(self.http_url(), token, timeout=timeout)

    def client(self, *, timeout: float | None = 60.0) -> HubClient:
        """A `HubClient` on the hub's gRPC port, presenting its service token (close it, or use
        it as a context manager)."""
        return HubClient(self.grpc_target(), timeout=timeout, service_token=self.service_token)


class SplitHub:
    """The container, schema, materialize and sync services and the gateway, each in its own
    container on a Docker network of their own (``snug-hub-<id>``), as a split deployment runs
    them. Only the gateway's HTTP port and the services' gRPC ports are published, on 127.0.0.1.

        with SplitHub(env={"SNUG_RPC_DEADLINE": "5s"}) as hub:
            hub.stop_service("sync")      # PUT /userdb now answers 503 SERVICE_UNAVAILABLE
            hub.start_service("sync")     # and succeeds again, the revisions kept
    """

    def __init__(
        self,
        image: str | None = None,
        *,
        cors_origins: Sequence[str] = _DEFAULT_ORIGINS,
        env: Mapping[str, str] | None = None,
        service_env: Mapping[Service, Mapping[str, str]] | None = None,
        startup_timeout: float = 60.0,
    ) -> None:
        """Args:
        image: ``name:tag``; default `hub_image()`.
        cors_origins: Browser origins the gateway allows (``SNUG_CORS_ORIGINS``).
        env: Extra environment for every container (e.g. ``SNUG_RPC_DEADLINE``); rate limits
            are off unless it sets them, as for `SnugHub`.
        service_env: Extra environment for one service's container, applied after `env`.
        startup_timeout: Seconds each container may take to become healthy.
        """
        deployment = _deployment_id()
        self.image = image or hub_image()
        #: The token every service requires (``SNUG_SERVICE_TOKEN``); the gateway presents it,
        #: and a client of `grpc_target` must too (``service_token=``).
        self.service_token = secrets.token_hex(32)
        self.network = Network(docker_network_kw={"labels": {LABEL: "1"}})
        self.network.name = f"snug-hub-{deployment}"
        names = {service: f"snug-hub-{deployment}-{service}" for service in SERVICES}
        self.containers: dict[Service, HubContainer] = {}
        for service in SERVICES:
            environment = {**_TEST_DEFAULTS, **_grpc_on_network(self.service_token), **(env or {})}
            if service == "gateway":
                addresses: tuple[tuple[str, Service], ...] = (
                    ("SNUG_SYNC_ADDR", "sync"),
                    ("SNUG_MATERIALIZE_ADDR", "materialize"),
                )
                for variable, target in addresses:
                    environment[variable] = f"http://{names[target]}:{GRPC_PORT}"
                environment["SNUG_CORS_ORIGINS"] = ",".join(cors_origins)
            environment.update((service_env or {}).get(service, {}))
            self.containers[service] = HubContainer(
                self.image,
                ["serve", service],
                name=names[service],
                env=environment,
                ports=[HTTP_PORT if service == "gateway" else GRPC_PORT],
                startup_timeout=startup_timeout,
                network=self.network,
            )
        self._network_created = False

    def start(self) -> SplitHub:
        """Creates the network, starts the five containers at once and waits until each one's
        health check passes; on any failure, removes what it started."""
        _no_reaper_unless_asked()
        try:
            self.network.create()
            self._network_created = True
            # All at once: five sequential starts would each wait for the previous health check.
            with ThreadPoolExecutor(max_workers=len(SERVICES)) as pool:
                for started in [pool.submit(c.start) for c in self.containers.values()]:
                    started.result()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Removes every container (with its volume), then the network."""
        for container in self.containers.values():
            if container._container is not None:
                try:
                    container.stop()
                except docker.errors.NotFound:
                    pass
        if self._network_created:
            self.network.remove()
            self._network_created = False

    def __enter__(self) -> SplitHub:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def container(self, service: Service) -> HubContainer:
        """The container of one service."""
        return self.containers[service]

    def http_url(self) -> str:
        """The gateway's base URL, e.g. ``http://127.0.0.1:49160``."""
        return f"http://127.0.0.1:{self.containers['gateway'].host_port(HTTP_PORT)}"

    def grpc_target(self, service: Service) -> str:
        """A service's gRPC target on the host, e.g. ``127.0.0.1:49153``; it changes when the
        service is started again."""
        if service == "gateway":
            raise ValueError("the gateway serves HTTP, not gRPC: use http_url()")
        return f"127.0.0.1:{self.containers[service].host_port(GRPC_PORT)}"

    def add_user(self, name: str) -> str:
        """Adds a user to the gateway with ``snug-hub users add`` and returns their token."""
        return self.containers["gateway"].add_user(name)

    def userdb(self, token: str, *, timeout: float | None = 60.0) -> UserDbClient:
        """A `UserDbClient` on the gateway for the user whose bearer token is `token`."""
        return UserDbClient(self.http_url(), token, timeout=timeout)

    def stop_service(self, service: Service) -> None:
        """Stops one service's container (SIGTERM, a graceful drain, SIGKILL after 10 s). Its
        volume stays; the others keep running."""
        self.containers[service].get_wrapped_container().stop(timeout=10)

    def start_service(self, service: Service) -> None:
        """Starts a stopped service's container again and waits until its health check
        passes; its host port is new."""
        container = self.containers[service]
        container.get_wrapped_container().start()
        container.wait_healthy()

    def restart_service(self, service: Service) -> None:
        """Stops and starts one service."""
        self.stop_service(service)
        self.start_service(service)

    def logs(self, service: Service) -> str:
        """What a service's container printed so far."""
        return self.containers[service].logs()
