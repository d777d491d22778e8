//! `diff`'s native part: the reading of both sides under the default rules, each file once
//! for its summary and its operators (`read.rs`; the comparison is in Python), and what
//! `kinetrace diff --rules hta` compares (`hta.rs`).

pub(crate) mod hta;
pub(crate) mod read;
