-- The served ledger's spool, as it is now named (`served/<generation>.spool`): "journal" names the
-- reclamation journal alone. Same table, same row, same class.
ALTER TABLE served_journal RENAME TO served_spool;
