//! What both job interpreters keep while a job's steps run (rows affected, the count, the
//! value, the rows returned) and how a job ends: its checks, then the [`Output`]. The SQLite
//! and PostgreSQL interpreters differ in how they run a statement, not in what they count.

use crate::error::database::DbError;
use crate::job::{Access, Job, Output, ResponseSettings};

/// The running totals of one job.
#[derive(Debug, Default)]
pub(super) struct Tally {
    affected: u64,
    row_count: u64,
    count: Option<u64>,
    existing: u64,
    value: Option<Vec<u8>>,
    response: ResponseSettings,
}

impl Tally {
    /// `n` rows changed by an `Execute` step.
    pub fn executed(&mut self, n: u64) {
        self.affected += n;
    }

    /// `n` rows returned by a `Rows` step: in a write, they are rows the write affected.
    pub fn returned(&mut self, access: Access, n: u64) {
        self.row_count += n;
        if access == Access::Write {
            self.affected += n;
        }
    }

    /// The `Count` or `Estimate` step's number.
    pub fn counted(&mut self, n: u64) {
        self.count = Some(n);
    }

    /// An `Existing` step's number.
    pub fn existed(&mut self, n: u64) {
        self.existing += n;
    }

    /// The `Value` step's JSON.
    pub fn valued(&mut self, json: Vec<u8>) {
        self.value = Some(json);
    }

    /// The `ResponseSettings` step's settings.
    pub fn responded(&mut self, settings: ResponseSettings) {
        self.response = settings;
    }

    /// A `Forbid` step: its refusal unless no row breaks the rule.
    pub fn forbid(violations: u64, refusal: &DbError) -> Result<(), DbError> {
        if violations > 0 {
            Err(refusal.clone())
        } else {
            Ok(())
        }
    }

    /// The job's checks (max-affected, exactly one row), then its output of encoded `rows`.
    pub fn finish(self, job: &Job, rows: Vec<u8>) -> Result<Output, DbError> {
        job.check(self.affected)?;
        Ok(Output {
            rows,
            row_count: self.row_count,
            count: self.count,
            affected: self.affected,
            existing: self.existing,
            value: self.value,
            response: self.response,
        })
    }
}
