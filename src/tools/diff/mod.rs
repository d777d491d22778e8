//! `diff`'s native part: the reading of both sides under the default rules, each file once
//! for its summary, its operators and its steps' GPU figures and counts (`read.rs`,
//! `steps.rs`; the comparison is in Python), and what `kinetrace diff --rules hta` compares
//! (`hta.rs`).

pub(crate) mod hta;
pub(crate) mod read;
pub(crate) mod steps;
