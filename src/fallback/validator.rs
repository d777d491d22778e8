//! The validator: the strict checker of [`crate::check`] on a thread of its own, fed a copy
//! of every chunk the fallback writes, so that an export whose text is still not strict JSON
//! after the repairs is discarded instead of written.

use std::io::{self, BufReader, Read};
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::thread::{self, JoinHandle};

use crate::check::strict_json_error;
use crate::error::{Error, Result};

/// Chunks from a channel, as a reader (end of file once every sender is gone).
struct ChannelReader {
    rx: Receiver<Vec<u8>>,
    chunk: Vec<u8>,
    pos: usize,
}

impl Read for ChannelReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.pos == self.chunk.len() {
            match self.rx.recv() {
                Ok(chunk) => {
                    self.chunk = chunk;
                    self.pos = 0;
                }
                Err(_) => return Ok(0),
            }
        }
        let n = buf.len().min(self.chunk.len() - self.pos);
        buf[..n].copy_from_slice(&self.chunk[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

/// The strict checker, run on its own thread over copies of the output.
pub struct Validator {
    tx: Option<SyncSender<Vec<u8>>>,
    handle: Option<JoinHandle<Result<Option<String>>>>,
}

impl Validator {
    pub fn start() -> Result<Validator> {
        let (tx, rx) = mpsc::sync_channel::<Vec<u8>>(8);
        let handle = thread::Builder::new()
            .name("kinetrace-fallback-validator".into())
            .spawn(move || {
                let reader = BufReader::with_capacity(
                    1 << 16,
                    ChannelReader {
                        rx,
                        chunk: Vec::new(),
                        pos: 0,
                    },
                );
                strict_json_error(reader)
            })
            .map_err(|e| Error::io("cannot start the validating thread", e))?;
        Ok(Validator {
            tx: Some(tx),
            handle: Some(handle),
        })
    }

    /// Hands a copy of `data` to the checker (which may have stopped at an error already).
    pub fn feed(&mut self, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        if let Some(tx) = &self.tx {
            if tx.send(data.to_vec()).is_err() {
                self.tx = None; // the checker is done (it found an error): stop copying
            }
        }
    }

    /// Ok when everything fed was one strict JSON document.
    pub fn finish(mut self) -> Result<()> {
        self.tx = None;
        let outcome = match self.handle.take().map(JoinHandle::join) {
            Some(Ok(outcome)) => outcome?,
            Some(Err(_)) => return Err(Error::Panic("the validating thread panicked".into())),
            None => None,
        };
        match outcome {
            None => Ok(()),
            Some(message) => Err(Error::State(format!(
                "Kineto's trace is not strict JSON even after kinetrace's repairs ({message}); \
                 the file was not written"
            ))),
        }
    }
}

impl Drop for Validator {
    fn drop(&mut self) {
        self.tx = None;
        if let Some(handle) = self.handle.take() {
            let _ = handle.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validator_accepts_json_and_rejects_the_rest() {
        let mut v = Validator::start().unwrap();
        v.feed(b"{\"a\": [1, ");
        v.feed(b"2]}");
        v.finish().unwrap();
        let mut v = Validator::start().unwrap();
        v.feed(b"{\"a\": \"x\"y\"}");
        let err = v.finish().unwrap_err().to_string();
        assert!(err.contains("not strict JSON"), "{err}");
    }
}
