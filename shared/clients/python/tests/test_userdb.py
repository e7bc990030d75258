"""The HTTP client against the hub's gateway (`SnugHub`): put and get with a revision conflict,
the 428 and 413 refusals, bearer tokens, revisions and restore, one app's export, and the
compare-and-swap loop."""

from __future__ import annotations

import hashlib
import io
import sqlite3
from pathlib import Path

import pytest

from snug_hub import UserDbClient, errors
from snug_hub.testcontainers import SnugHub
from support import QUOTA_BYTES, vector


def stored_form(hub: SnugHub, image: bytes) -> bytes:
    """The image as the hub stores and serves it: its SQLite free space zeroed, as the schema
    service's ValidateSyncImage lists it."""
    with hub.client() as client:
        validated = client.schema.validate_sync_image(image)
    stored = bytearray(image)
    for free in validated.free_space:
        stored[free.offset : free.offset + free.length] = bytes(free.length)
    assert hashlib.sha256(stored).digest() == validated.sha256
    return bytes(stored)


def test_put_and_get_with_a_revision_conflict(hub: SnugHub, tmp_path: Path) -> None:
    userdb = hub.userdb(hub.add_user("put-get"))
    with pytest.raises(errors.NotFound) as empty:
        userdb.get()
    assert empty.value.http_status == 404

    first = vector("userdb", "sample-v6.export.snug")
    path = tmp_path / "first.snug"
    path.write_bytes(first)
    r1 = userdb.put(path, create=True)
    got = userdb.get()
    assert got.revision == r1
    assert got.data == stored_form(hub, first)
    assert got.sha256 == hashlib.sha256(got.data).hexdigest() and got.size == len(got.data)
    assert got.storage_version == 6
    assert userdb.head().revision == r1

    second = vector("userdb", "fresh-v6.export.snug")
    r2 = userdb.put(io.BytesIO(second), if_match=r1)
    assert r2 != r1

    # A writer still based on r1 lost the race: 412, with the current revision to start over from.
    with pytest.raises(errors.RevisionMismatch) as conflict:
        userdb.put(first, if_match=r1)
    assert conflict.value.current_revision == r2
    assert (conflict.value.http_status, conflict.value.retryable) == (412, True)
    with pytest.raises(errors.RevisionMismatch) as exists:
        userdb.put(first, create=True)
    assert exists.value.current_revision == r2
    assert userdb.get().revision == r2, "a refused write changes nothing"

    downloaded = tmp_path / "pulled.snug"
    info = userdb.download(downloaded)
    assert info.revision == r2 and downloaded.read_bytes() == stored_form(hub, second)


def test_refusals_over_http_are_typed(hub: SnugHub) -> None:
    userdb = hub.userdb(hub.add_user("refusals"))
    image = vector("userdb", "fresh-v6.export.snug")
    with pytest.raises(errors.PreconditionRequired) as unconditional:
        userdb.put(image)
    assert unconditional.value.http_status == 428
    with pytest.raises(errors.TooLarge) as too_large:
        userdb.put(bytes(QUOTA_BYTES + 1), create=True)
    assert (too_large.value.http_status, too_large.value.http_code) == (413, "USERDB_TOO_LARGE")
    with pytest.raises(errors.SecretsPresent):
        userdb.put(vector("userdb", "sample-v6.user.snug"), create=True)
    with pytest.raises(errors.ContainerNotAccepted):
        userdb.put(vector("containers", "c01-reference-random-600k.snug"), create=True)
    with pytest.raises(errors.Unauthenticated) as anonymous:
        UserDbClient(hub.http_url()).get()
    assert anonymous.value.http_status == 401
    with pytest.raises(errors.Unauthenticated):
        hub.userdb("not-a-token").put(image, create=True)


def test_revisions_restore_and_one_apps_export(hub: SnugHub, tmp_path: Path) -> None:
    userdb = hub.userdb(hub.add_user("history"))
    r1 = userdb.put(vector("userdb", "sample-v6.export.snug"), create=True)
    r2 = userdb.put(vector("userdb", "fresh-v6.export.snug"), if_match=r1)
    history = userdb.revisions()
    assert [entry.revision for entry in history] == [r2, r1]
    assert history[1].base is None and history[0].base == r1 and history[0].retained

    with pytest.raises(errors.RevisionMismatch):
        userdb.restore(r1, if_match=r1)
    restored = userdb.restore(r1, if_match=r2)
    assert restored.restored_from == r1 and restored.base == r2
    assert restored.sha256 == history[1].sha256
    assert userdb.head().revision == restored.revision
    with pytest.raises(errors.NotFound):
        userdb.restore("r999-0000000000000000", if_match=restored.revision)

    app = tmp_path / "chess.snug"
    name = userdb.export_app("starter--chess", app)
    assert name.endswith(".snug")
    with sqlite3.connect(f"file:{app}?mode=ro", uri=True) as db:
        tables = [row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    assert tables and not any(t.startswith(("snug_", "app_")) for t in tables), tables
    with pytest.raises(errors.AppNotFound):
        userdb.export_app("no-such-app", io.BytesIO())


def test_the_compare_and_swap_loop_starts_again_after_losing_a_race(hub: SnugHub) -> None:
    token = hub.add_user("cas-loop")
    userdb = hub.userdb(token)
    other = hub.userdb(token)
    first = vector("userdb", "fresh-v6.export.snug")
    second = vector("userdb", "sample-v6.export.snug")
    seen: list[bytes | None] = []

    def change(current: bytes | None) -> bytes:
        seen.append(current)
        if len(seen) == 1:
            # Another device writes between this read and the write below.
            other.put(first, create=True)
        return second

    revision = userdb.update(change)
    assert seen == [None, stored_form(hub, first)], "read again after the conflict"
    assert userdb.get().revision == revision

    def always_loses(current: bytes | None) -> bytes:
        other.put(first, if_match=other.head().revision)
        return second

    with pytest.raises(errors.RevisionMismatch):
        userdb.update(always_loses, attempts=2)


def test_watch_hears_each_push_and_resumes_after_the_last_seen(hub: SnugHub) -> None:
    userdb = hub.userdb(hub.add_user("watcher"))
    events = userdb.watch()
    assert next(events).kind == "no-image"
    r1 = userdb.put(vector("userdb", "sample-v6.export.snug"), create=True)
    heard = next(events)
    assert heard.kind == "revision" and heard.info == userdb.head()
    assert heard.info is not None and heard.info.revision == r1
    r2 = userdb.put(vector("userdb", "fresh-v6.export.snug"), if_match=r1)
    heard = next(events)
    assert heard.info is not None and heard.info.revision == r2
    events.close()
    # A device that saw r1 resumes after it and misses nothing.
    resumed = userdb.watch(last_event_id=r1)
    heard = next(resumed)
    assert heard.info is not None and heard.info.revision == r2
    resumed.close()
    # Refusals are typed, as every route's.
    with pytest.raises(errors.Unauthenticated):
        next(hub.userdb("not-a-token").watch())
