//! Domain values to proto messages (the serializable counterparts live in `snug-proto`).

use snug_materialize::{AppsTables, PersistReport, RegistryChange, SqlValue, StatementResult};
use snug_proto::materialize::v1 as pb;
use snug_schema::OpenReport;

pub(crate) fn open_summary(open: &OpenReport) -> pb::OpenSummary {
    pb::OpenSummary {
        found_version: open.found_version,
        wrote: open.wrote,
    }
}

pub(crate) fn persist_report(report: PersistReport) -> pb::PersistReport {
    let registry = match report.registry {
        RegistryChange::Unchanged => pb::RegistryChange::Unchanged,
        RegistryChange::Written => pb::RegistryChange::Written,
        RegistryChange::Deleted => pb::RegistryChange::Deleted,
    };
    pb::PersistReport {
        wrote: report.wrote,
        unchanged_runtime: report.unchanged_runtime,
        tables_written: report.tables_written,
        tables_unchanged: report.tables_unchanged,
        tables_dropped: report.tables_dropped,
        registry: registry.into(),
        uses_db_set: report.uses_db_set,
        migrations_appended: report.migrations_appended as u64,
    }
}

fn value(value: SqlValue) -> pb::SqlValue {
    use pb::sql_value::Value;
    let value = match value {
        SqlValue::Null => Value::Null(pb::SqlNull {}),
        SqlValue::Integer(i) => Value::Integer(i),
        SqlValue::Real(r) => Value::Real(r),
        SqlValue::Text(t) => Value::Text(t),
        SqlValue::Blob(b) => Value::Blob(b.into()),
    };
    pb::SqlValue { value: Some(value) }
}

pub(crate) fn statement_result(result: StatementResult) -> pb::StatementResult {
    pb::StatementResult {
        columns: result.columns,
        rows: result
            .rows
            .into_iter()
            .map(|row| pb::Row {
                values: row.into_iter().map(value).collect(),
            })
            .collect(),
        truncated: result.truncated,
        changes: result.changes,
    }
}

pub(crate) fn listing(listing: AppsTables, open: &OpenReport) -> pb::ListAppTablesResponse {
    pb::ListAppTablesResponse {
        apps: listing
            .apps
            .into_iter()
            .map(|app| pb::AppTables {
                app_id: app.namespace,
                token: app.token,
                uses_db: app.uses_db,
                registered: app.registered,
                tables: app
                    .tables
                    .into_iter()
                    .map(|table| pb::AppTable {
                        name: table.name,
                        rest_name: table.rest_name,
                        rows: table.rows,
                    })
                    .collect(),
            })
            .collect(),
        orphaned: listing.orphaned,
        open: Some(open_summary(open)),
    }
}
