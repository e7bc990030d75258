-- Ladder fixture, storage version 5, written from ../shared/reference/snug-reference-notes.md
-- §(a.1)/(a.3), independently of snug-schema's ddl module. v5 (notes a.3): snug_auth_specs dropped; 13 tables, no snug_app_versions.runtime_contract_json.
CREATE TABLE snug_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE snug_profile (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE snug_settings (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE snug_secrets (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE snug_apps (
    app_id TEXT PRIMARY KEY,
    display_name TEXT NOT NULL,
    description TEXT,
    icon_emoji TEXT,
    icon_color TEXT,
    uses_db INTEGER NOT NULL DEFAULT 0,
    current_version INTEGER NOT NULL,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    install_source TEXT
  );
CREATE TABLE snug_app_versions (
    app_id TEXT NOT NULL,
    version INTEGER NOT NULL,
    html TEXT NOT NULL,
    note TEXT,
    created_at TEXT NOT NULL,
    pinned INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (app_id, version)
  );
CREATE TABLE snug_app_schemas (
    app_id TEXT PRIMARY KEY,
    token TEXT NOT NULL,
    schema_json TEXT NOT NULL,
    updated_at TEXT NOT NULL
  );
CREATE TABLE snug_app_migrations (
    app_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    ddl TEXT NOT NULL,
    applied_at TEXT NOT NULL,
    PRIMARY KEY (app_id, seq)
  );
CREATE TABLE snug_app_docs (
    app_id TEXT NOT NULL,
    slug TEXT NOT NULL,
    title TEXT,
    content TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (app_id, slug)
  );
CREATE TABLE snug_chat_threads (
    thread_id TEXT PRIMARY KEY,
    app_id TEXT,
    title TEXT,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
  );
CREATE TABLE snug_chat_messages (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    thread_id TEXT NOT NULL,
    role TEXT NOT NULL,
    content TEXT NOT NULL,
    created_at TEXT NOT NULL,
    pinned INTEGER NOT NULL DEFAULT 0,
    meta TEXT
  );
CREATE TABLE snug_sync (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE snug_connections (
    app_id TEXT NOT NULL,
    slot TEXT NOT NULL,
    requirement_json TEXT NOT NULL,
    requirement_version INTEGER NOT NULL,
    provenance TEXT NOT NULL,
    confidence REAL,
    status TEXT NOT NULL,
    pending_requirement_json TEXT,
    imported INTEGER NOT NULL DEFAULT 0,
    allowed_hosts TEXT NOT NULL DEFAULT '[]',
    approved_at TEXT,
    revoked_at TEXT,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (app_id, slot)
  );
CREATE TABLE "app_x6170702d31__items" (id INTEGER PRIMARY KEY, label TEXT);
CREATE UNIQUE INDEX idx_snug_apps_install_source
    ON snug_apps (install_source) WHERE install_source IS NOT NULL;
INSERT INTO snug_apps VALUES ('app-1', 'Notes', NULL, NULL, NULL, 1, 2, '2025-06-01T00:00:00.000Z', '2025-06-02T00:00:00.000Z', 'starter:notes');
INSERT INTO snug_app_versions VALUES ('app-1', 1, '<p>one</p>', NULL, '2025-06-01T00:00:00.000Z', 1);
INSERT INTO snug_app_versions VALUES ('app-1', 2, '<p>two</p>', 'edit', '2025-06-02T00:00:00.000Z', 0);
INSERT INTO snug_app_schemas VALUES ('app-1', 'x6170702d31', '{"objects":[{"type":"table","name":"items","ddl":"CREATE TABLE items (id INTEGER PRIMARY KEY, label TEXT)"}]}', '2025-06-02T00:00:00.000Z');
INSERT INTO snug_app_migrations VALUES ('app-1', 1, 'CREATE TABLE items (id INTEGER PRIMARY KEY, label TEXT)', '2025-06-02T00:00:00.000Z');
INSERT INTO "app_x6170702d31__items" VALUES (1, 'first item');
INSERT INTO snug_app_docs VALUES ('app-1', 'readme', 'Read me', 'hello', '2025-06-02T00:00:00.000Z');
INSERT INTO snug_chat_threads VALUES ('app:app-1', 'app-1', 'Chat', '2025-06-01T00:00:00.000Z', '2025-06-01T00:00:00.000Z');
INSERT INTO snug_chat_messages (thread_id, role, content, created_at, pinned, meta) VALUES ('app:app-1', 'user', 'hi', '2025-06-01T00:00:00.000Z', 1, '{"k":1}');
INSERT INTO snug_settings VALUES ('mode', '"byok"');
INSERT INTO snug_secrets VALUES ('auth:app-1:apiKey', 'legacy-three-segment');
INSERT INTO snug_secrets VALUES ('auth:app-1:broker:apiKey', 'four-segment');
INSERT INTO snug_secrets VALUES ('auth:_state_hmac', 'hmac');
INSERT INTO snug_secrets VALUES ('auth:_flow:f1', '{}');
INSERT INTO snug_secrets VALUES ('byok:anthropic', 'sk-ant');
INSERT INTO snug_meta VALUES ('db_id', '0b6f1f0e-7d3c-4e4b-9a55-3f2d1c0b9a88');
INSERT INTO snug_meta VALUES ('created_at', '2025-06-01T00:00:00.000Z');
INSERT INTO snug_connections VALUES ('app-1', 'broker', '{"slot":"broker","provider":{"name":"Broker"},"kind":"api_key","declaredApiHosts":["api.example.com"]}', 1, 'inference', NULL, 'approved', NULL, 0, '["api.example.com"]', '2025-06-02T00:00:00.000Z', NULL, '2025-06-02T00:00:00.000Z', '2025-06-02T00:00:00.000Z');
PRAGMA user_version = 5;
