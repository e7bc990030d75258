//! Domain values to their proto messages (the "serializable counterpart" lives here, never in
//! `snug-schema`).

use snug_proto::schema::v1 as pb;
use snug_schema::{
    App, AppVersion, ChatMessage, ChatRole, ChatThread, Doc, DroppedConnection, HealPlan,
    HealReport, ImportReport, Inspection, OpenReport, RefusalSummary, RequirementProblem,
    TableClass, TableKind, TableSummary, VersionSummary,
};

fn count(n: usize) -> u64 {
    n as u64
}

pub(crate) fn table_class(class: TableClass) -> pb::TableClass {
    match class {
        TableClass::Portable => pb::TableClass::Portable,
        TableClass::HostInternal => pb::TableClass::HostInternal,
        TableClass::Config => pb::TableClass::Config,
        TableClass::SyncConfig => pb::TableClass::SyncConfig,
        TableClass::Secret => pb::TableClass::Secret,
    }
}

fn table_summary(table: TableSummary) -> pb::TableSummary {
    let (kind, app_token, app_table) = match table.kind {
        TableKind::Hub { .. } => (pb::TableKind::Hub, String::new(), String::new()),
        TableKind::AppData { token, name } => (pb::TableKind::AppData, token, name),
        TableKind::SqliteInternal => (pb::TableKind::SqliteInternal, String::new(), String::new()),
        TableKind::Foreign => (pb::TableKind::Foreign, String::new(), String::new()),
    };
    pb::TableSummary {
        name: table.name,
        kind: kind.into(),
        table_class: table
            .class
            .map_or(pb::TableClass::Unspecified, table_class)
            .into(),
        rows: table.rows,
        app_token,
        app_table,
    }
}

fn heal_plan(plan: HealPlan) -> pb::HealPlan {
    pb::HealPlan {
        missing_tables: plan
            .missing_tables
            .iter()
            .map(|t| (*t).to_owned())
            .collect(),
        missing_columns: plan.missing_columns,
        missing_index: plan.missing_index,
    }
}

fn refusal(summary: RefusalSummary) -> pb::Refusal {
    pb::Refusal {
        reason: summary.reason.to_owned(),
        message: summary.message,
    }
}

pub(crate) fn inspection(inspection: Inspection, length: u64) -> pb::InspectUserDatabaseResponse {
    pb::InspectUserDatabaseResponse {
        storage_version: inspection.storage_version,
        supported_version: inspection.supported_version,
        tables: inspection.tables.into_iter().map(table_summary).collect(),
        migrate_from: inspection.migrate_from,
        heal: Some(heal_plan(inspection.heal)),
        legacy_credentials: count(inspection.legacy_credentials),
        needs_meta_seed: inspection.needs_meta_seed,
        open_refusal: inspection.open_refusal.map(refusal),
        import_refusal: inspection.import_refusal.map(refusal),
        length,
    }
}

pub(crate) fn heal_report(heal: HealReport) -> pb::HealReport {
    pb::HealReport {
        tables: heal.tables.iter().map(|t| (*t).to_owned()).collect(),
        columns: heal.columns,
        index: heal.index,
        install_sources_cleared: count(heal.install_sources_cleared),
    }
}

pub(crate) fn open_report(report: OpenReport) -> pb::OpenReport {
    pb::OpenReport {
        found_version: report.found_version,
        advanced: report.advanced,
        healed: report.heal.healed(),
        heal: Some(heal_report(report.heal)),
        credentials_wiped: count(report.credentials_wiped),
        seeded_meta: report.seeded_meta,
        wrote: report.wrote,
    }
}

fn dropped_connection(dropped: DroppedConnection) -> pb::DroppedConnection {
    let (problem, key) = match dropped.reason {
        RequirementProblem::NotJson => (pb::RequirementProblem::NotJson, String::new()),
        RequirementProblem::NotObject => (pb::RequirementProblem::NotObject, String::new()),
        RequirementProblem::UnknownKey { key } => (pb::RequirementProblem::UnknownKey, key),
        RequirementProblem::BadSlot => (pb::RequirementProblem::BadSlot, String::new()),
        RequirementProblem::BadKind => (pb::RequirementProblem::BadKind, String::new()),
        RequirementProblem::BadProvider => (pb::RequirementProblem::BadProvider, String::new()),
        RequirementProblem::BadHosts => (pb::RequirementProblem::BadHosts, String::new()),
        RequirementProblem::BadEndpoints => (pb::RequirementProblem::BadEndpoints, String::new()),
    };
    pb::DroppedConnection {
        app_id: dropped.app_id,
        slot: dropped.slot,
        problem: problem.into(),
        key,
    }
}

pub(crate) fn import_report(report: ImportReport) -> pb::CheckImportResponse {
    pb::CheckImportResponse {
        was_protected: report.was_protected,
        found_version: report.found_version,
        advanced: report.advanced,
        heal: Some(heal_report(report.healed)),
        credentials_wiped: count(report.credentials_wiped),
        restored_grants: count(report.restored_grants),
        demoted_connections: count(report.demoted_connections),
        dropped_connections: report
            .dropped_connections
            .into_iter()
            .map(dropped_connection)
            .collect(),
        dropped_runtime_contracts: report
            .dropped_runtime_contracts
            .into_iter()
            .map(|c| pb::DroppedContract {
                app_id: c.app_id,
                version: c.version,
            })
            .collect(),
    }
}

pub(crate) fn app(app: App) -> pb::App {
    pb::App {
        app_id: app.app_id,
        display_name: app.display_name,
        description: app.description,
        icon_emoji: app.icon_emoji,
        icon_color: app.icon_color,
        uses_db: app.uses_db,
        current_version: app.current_version,
        created_at: app.created_at,
        updated_at: app.updated_at,
        install_source: app.install_source,
    }
}

pub(crate) fn version_summary(version: VersionSummary) -> pb::VersionSummary {
    pb::VersionSummary {
        version: version.version,
        note: version.note,
        created_at: version.created_at,
        pinned: version.pinned,
        has_runtime_contract: version.has_runtime_contract,
    }
}

pub(crate) fn app_version(version: AppVersion) -> pb::AppVersion {
    pb::AppVersion {
        app_id: version.app_id,
        version: version.version,
        html: version.html,
        note: version.note,
        created_at: version.created_at,
        pinned: version.pinned,
        runtime_contract_json: version.runtime_contract_json,
    }
}

pub(crate) fn doc(doc: Doc) -> pb::Doc {
    pb::Doc {
        app_id: doc.app_id,
        slug: doc.slug,
        title: doc.title,
        content: doc.content,
        updated_at: doc.updated_at,
    }
}

pub(crate) fn chat_role(role: ChatRole) -> pb::ChatRole {
    match role {
        ChatRole::User => pb::ChatRole::User,
        ChatRole::Assistant => pb::ChatRole::Assistant,
        ChatRole::System => pb::ChatRole::System,
    }
}

pub(crate) fn chat_thread(thread: ChatThread) -> pb::ChatThread {
    pb::ChatThread {
        thread_id: thread.thread_id,
        app_id: thread.app_id,
        title: thread.title,
        created_at: thread.created_at,
        updated_at: thread.updated_at,
    }
}

pub(crate) fn chat_message(message: ChatMessage) -> pb::ChatMessage {
    pb::ChatMessage {
        id: message.id,
        thread_id: message.thread_id,
        role: chat_role(message.role).into(),
        content: message.content,
        created_at: message.created_at,
        pinned: message.pinned,
        meta_json: message.meta,
    }
}
