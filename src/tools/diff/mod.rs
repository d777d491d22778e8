//! `diff`'s native part: what `kinetrace diff --rules hta` compares (`hta.rs`); the default
//! rules compare `summary`'s figures in Python.

pub(crate) mod hta;
