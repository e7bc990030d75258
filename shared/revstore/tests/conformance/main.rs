//! The conformance suite: one set of cases, run against every backend.
//!
//! `conformance_suite!(name, opener)` instantiates every case for one backend. The PostgreSQL
//! instance runs when the crate is built with `--features postgres` and `SNUG_TEST_POSTGRES_URL`
//! names a server, the PostgreSQL-plus-objects instance when there is also a `garage` binary (each
//! case starts a single-node Garage of its own); without them their cases return at once, so a default test run needs nothing
//! external.

#[path = "../support/mod.rs"]
mod support;

mod cases;

macro_rules! conformance_suite {
    ($backend:ident, $open:path) => {
        mod $backend {
            conformance_suite!(@cases $open;
                first_write_requires_must_not_exist,
                must_not_exist_on_existing_reports_current,
                stale_and_unknown_revisions_are_distinct,
                revision_tokens_are_unique_and_etag_safe,
                quota_boundary_is_exact_and_refused_early,
                body_failure_writes_nothing,
                retry_of_the_same_put_is_idempotent,
                idempotency_key_replays_and_refuses_reuse,
                history_lists_newest_first_and_restore_copies_forward,
                storage_version_is_recorded_at_acceptance_and_carried_by_restore,
                head_revision_describes_a_retained_revision,
                read_revision_reads_a_base_without_serving_it,
                a_delta_round_trip_rebuilds_the_image_from_its_base,
                a_put_derived_from_its_base_stores_what_a_put_stores,
                uniform_denial,
                first_contact_provisions_only,
                reclaim_keeps_newest_and_grace_and_journals,
                reclaim_never_takes_the_current_image,
                reclaim_spares_the_base_of_a_put_in_flight,
                reclaim_spares_a_leased_download,
                reclaim_between_read_back_and_commit_spares_the_put,
                a_put_never_lands_on_an_object_a_pass_deletes,
                reclaim_refuses_on_incomplete_listing,
                orphans_are_reclaimed_after_grace,
                chunks_are_deduplicated_across_revisions,
                a_history_of_small_edits_reads_back_through_reclamation,
                ledgers_record_served_and_verdicts,
                a_damaged_chunk_is_never_served,
                a_put_reusing_a_damaged_chunk_writes_it_afresh,
                a_put_that_does_not_land_leaves_nothing_behind,
                a_users_unfinished_puts_are_limited,
                health_reports_the_backend,
                erasure_leaves_no_byte_of_the_user_and_spares_a_sharer,
                a_put_racing_an_erasure_is_refused_and_leaves_nothing,
                a_failed_wipe_is_retried_until_done,
                a_per_user_quota_replaces_the_default,
                a_commit_wakes_its_users_subscribers,
            );
        }
    };
    (@cases $open:path; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                crate::cases::$case(|tune| $open(tune)).await;
            }
        )*
    };
}

conformance_suite!(memory, crate::support::mem);
conformance_suite!(sqlite, crate::support::sqlite);
#[cfg(feature = "postgres")]
conformance_suite!(postgres, crate::support::pg);
#[cfg(feature = "postgres")]
conformance_suite!(postgres_objects, crate::support::pg_objects);
