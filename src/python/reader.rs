//! Reading activities: torch's accessors called from Rust, each value converted straight
//! into the columns (`trace::Timing`s of the first pass, a `trace::Batch` of the second).
//!
//! An *accessor* is one of the thirteen methods of `_ITraceActivity` (see [`FIELDS`]).
//! [`Accessors`] holds them for one activity type. Reading goes through the activity list
//! row by row (every field of one activity, then the next), calls each accessor once per
//! activity and only where the format needs its value (the rule of `trace::Batch`), and
//! builds no Python object but the values the accessors return.
//!
//! torch's accessors are pybind11 functions (`METH_FASTCALL` C functions of `self` and an
//! argument array, in every torch with `trace_activities()`). Those are called directly,
//! the activity passed in the array without taking a reference to it: calling never writes
//! the activity object (its reference count), so processes forked after
//! `trace_activities()` read their slices without copying the pages the activities live on
//! (copy-on-write), and the parent reading its own slice copies nothing either. The list keeps the activities alive meanwhile: it is the export's own
//! (from `trace_activities()`), and the accessors run no Python code. Any other callable
//! (Python look-alikes, `operator.methodcaller` for lists of mixed types) is called the
//! ordinary way, with a reference held for the call.

use pyo3::exceptions::PyTypeError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyList, PyType};

use super::{push_str, type_name};
use crate::error::Error;
use crate::export::trace::{is_kernel, needs_correlation_id, Batch, Flow, StrColumn};

/// The accessors, in the order [`Accessors`] takes them.
pub(crate) const FIELDS: [&str; 13] = [
    "device_id",
    "resource_id",
    "timestamp",
    "duration",
    "type",
    "linked_correlation_id",
    "flow_id",
    "name",
    "metadata_json",
    "correlation_id",
    "flow_type",
    "flow_start",
    "linked_activity",
];

/// `FIELDS` as the error messages name them.
const CALLS: [&str; 13] = [
    "device_id()",
    "resource_id()",
    "timestamp()",
    "duration()",
    "type()",
    "linked_correlation_id()",
    "flow_id()",
    "name()",
    "metadata_json()",
    "correlation_id()",
    "flow_type()",
    "flow_start()",
    "linked_activity()",
];

const DEVICE: usize = 0;
const RESOURCE: usize = 1;
const TIMESTAMP: usize = 2;
const DURATION: usize = 3;
const CATEGORY: usize = 4;
const LINKED_ID: usize = 5;
const FLOW_ID: usize = 6;
const NAME: usize = 7;
const METADATA: usize = 8;
const CORRELATION: usize = 9;
const FLOW_TYPE: usize = 10;
const FLOW_START: usize = 11;
const LINKED: usize = 12;

/// Rows read between two looks for a pending signal (Ctrl-C): direct calls run no Python
/// code, so nothing else would notice one until the batch is read.
const SIGNAL_CHECK_ROWS: usize = 256;

/// A record function's name whose metadata a kernel linked to it carries (comms kernels).
const PARAM_COMMS_NAME: &[u8] = b"record_param_comms";

/// One accessor.
enum Getter {
    /// A `METH_FASTCALL | METH_KEYWORDS` C function (pybind11 3's, torch >= 2.13):
    /// called directly with an argument array.
    Direct {
        function: ffi::PyCFunctionFastWithKeywords,
        /// Its `self` (pybind11's function record); kept alive by `owner`.
        slf: usize,
        owner: Py<PyAny>,
    },
    /// Anything else: called the ordinary way, with a reference to the activity held.
    Call(Py<PyAny>),
}

impl Getter {
    fn new(callable: Bound<'_, PyAny>) -> Getter {
        let ptr = callable.as_ptr();
        // SAFETY: type checks and getters of a live object; the function pointer is cast
        // to the signature its flags declare, as CPython itself calls it.
        unsafe {
            if ffi::PyCFunction_Check(ptr) != 0
                && ffi::PyCFunction_GetFlags(ptr) == ffi::METH_FASTCALL | ffi::METH_KEYWORDS
            {
                if let Some(meth) = ffi::PyCFunction_GetFunction(ptr) {
                    let function = std::mem::transmute::<
                        ffi::PyCFunction,
                        ffi::PyCFunctionFastWithKeywords,
                    >(meth);
                    let slf = ffi::PyCFunction_GetSelf(ptr) as usize;
                    return Getter::Direct {
                        function,
                        slf,
                        owner: callable.unbind(),
                    };
                }
            }
        }
        Getter::Call(callable.unbind())
    }
}

/// The accessors of one activity type (see the module docs), built by
/// `kinetrace._export.extract.activity_getters`.
#[pyclass(module = "kinetrace._kinetrace", name = "_Accessors", frozen)]
pub(crate) struct Accessors {
    getters: Vec<Getter>,
    /// Every accessor is a C function and tuples are laid out as expected: activities are
    /// passed without taking a reference.
    direct: bool,
    /// The activities' type, when they all have one (a linked activity of another type is
    /// read through its own methods).
    kind: Option<Py<PyType>>,
}

#[pymethods]
impl Accessors {
    /// `getters`: the thirteen accessors in the order of `FIELDS`, each called with the
    /// activity as its one argument; `kind`: the one type of every activity, or None.
    #[new]
    fn new(kind: Option<Bound<'_, PyType>>, getters: Vec<Bound<'_, PyAny>>) -> PyResult<Self> {
        if getters.len() != FIELDS.len() {
            return Err(Error::InvalidArgument(format!(
                "{} accessors given, {} needed",
                getters.len(),
                FIELDS.len()
            ))
            .into());
        }
        let getters: Vec<Getter> = getters.into_iter().map(Getter::new).collect();
        let direct = kind.is_some() && getters.iter().all(|g| matches!(g, Getter::Direct { .. }));
        Ok(Accessors {
            getters,
            direct,
            kind: kind.map(Bound::unbind),
        })
    }

    /// Whether activities are read without taking references (see the module docs).
    #[getter]
    fn direct(&self) -> bool {
        self.direct
    }

    /// The accessor names, in the order the constructor takes them.
    #[classattr]
    fn fields() -> Vec<&'static str> {
        FIELDS.to_vec()
    }
}

/// The one type of every item of `list`, or None (also for an empty list). Reads the items
/// without taking references to them.
#[pyfunction]
pub(crate) fn common_type<'py>(activities: &Bound<'py, PyList>) -> Option<Bound<'py, PyType>> {
    let list = activities;
    let first = list.get_item(0).ok()?;
    let kind = first.get_type();
    let kind_ptr = kind.as_ptr().cast::<ffi::PyTypeObject>();
    for i in 1..list.len() {
        // SAFETY: `i` is in range and the GIL is held; the borrowed item is only compared.
        let item = unsafe { ffi::PyList_GetItem(list.as_ptr(), i as ffi::Py_ssize_t) };
        if item.is_null() || unsafe { ffi::Py_TYPE(item) } != kind_ptr {
            return None;
        }
    }
    Some(kind)
}

/// `function(slf, [item])` without a reference to `item`.
///
/// # Safety
/// `item` must stay alive for the call (the caller's list holds it), and `function` and
/// `slf` must come from one C function (see `Getter::new`).
unsafe fn call_direct<'py>(
    py: Python<'py>,
    function: ffi::PyCFunctionFastWithKeywords,
    slf: usize,
    item: *mut ffi::PyObject,
) -> PyResult<Bound<'py, PyAny>> {
    let args = [item];
    let result = function(
        slf as *mut ffi::PyObject,
        args.as_ptr(),
        1,
        std::ptr::null_mut(),
    );
    Bound::from_owned_ptr_or_err(py, result)
}

/// Reads the accessors of the activities of one list, row by row.
struct Reader<'a, 'py> {
    py: Python<'py>,
    acc: &'a Accessors,
    list: &'a Bound<'py, PyList>,
}

/// One activity while its fields are read: borrowed from the list (direct calls) or held.
enum Row<'py> {
    Borrowed(*mut ffi::PyObject),
    Held(Bound<'py, PyAny>),
}

impl<'a, 'py> Reader<'a, 'py> {
    fn new(
        py: Python<'py>,
        acc: &'a Accessors,
        list: &'a Bound<'py, PyList>,
        lo: usize,
        hi: usize,
    ) -> PyResult<Self> {
        if lo > hi || hi > list.len() {
            return Err(Error::InvalidArgument(format!(
                "activities {lo}..{hi} of a list of {}",
                list.len()
            ))
            .into());
        }
        Ok(Reader { py, acc, list })
    }

    fn row(&self, i: usize) -> PyResult<Row<'py>> {
        if i.is_multiple_of(SIGNAL_CHECK_ROWS) {
            self.py.check_signals()?;
        }
        if self.acc.direct {
            // SAFETY: `i` was checked against the list's length, which nothing changes
            // while the GIL is held and only C accessors run.
            let item = unsafe { ffi::PyList_GetItem(self.list.as_ptr(), i as ffi::Py_ssize_t) };
            if item.is_null() {
                return Err(PyErr::fetch(self.py));
            }
            Ok(Row::Borrowed(item))
        } else {
            Ok(Row::Held(self.list.get_item(i)?))
        }
    }

    /// The value of accessor `field` for `row`.
    fn get(&mut self, row: &Row<'py>, field: usize) -> PyResult<Bound<'py, PyAny>> {
        match (row, &self.acc.getters[field]) {
            (Row::Borrowed(item), Getter::Direct { function, slf, .. }) => {
                // SAFETY: the list holds `item` (see `row`); `function` and `slf` are one
                // C function's (see `Getter::new`).
                unsafe { call_direct(self.py, *function, *slf, *item) }
            }
            (Row::Held(item), Getter::Call(f)) => f.bind(self.py).call1((item,)),
            (Row::Held(item), Getter::Direct { owner, .. }) => owner.bind(self.py).call1((item,)),
            (Row::Borrowed(_), Getter::Call(_)) => {
                unreachable!("rows are borrowed only when every accessor is direct")
            }
        }
    }

    fn int(&mut self, row: &Row<'py>, field: usize) -> PyResult<i64> {
        let value = self.get(row, field)?;
        value.extract::<i64>().map_err(|_| int_error(&value, field))
    }

    fn string(&mut self, row: &Row<'py>, field: usize, col: &mut StrColumn) -> PyResult<()> {
        let value = self.get(row, field)?;
        push_str(col, &value, CALLS[field])
    }

    /// The metadata of the `record_param_comms` activity a kernel is linked to, if any.
    fn comms_metadata(&mut self, row: &Row<'py>, col: &mut StrColumn) -> PyResult<()> {
        let linked = self.get(row, LINKED)?;
        if linked.is_none() {
            col.push(b"");
            return Ok(());
        }
        let same_kind = self
            .acc
            .kind
            .as_ref()
            .is_some_and(|k| linked.get_type().is(k.bind(self.py)));
        let metadata = if same_kind {
            // `linked` is a reference of ours, alive for both calls.
            let held = if self.acc.direct {
                Row::Borrowed(linked.as_ptr())
            } else {
                Row::Held(linked.clone())
            };
            let name = self.get(&held, NAME)?;
            if is_comms(&name)? {
                Some(self.get(&held, METADATA)?)
            } else {
                None
            }
        } else {
            let name = linked.call_method0("name")?;
            if is_comms(&name)? {
                Some(linked.call_method0("metadata_json")?)
            } else {
                None
            }
        };
        match metadata {
            Some(m) if m.is_truthy()? => push_str(col, &m, "linked activity metadata_json()"),
            _ => {
                col.push(b"");
                Ok(())
            }
        }
    }
}

fn is_comms(name: &Bound<'_, PyAny>) -> PyResult<bool> {
    Ok(match name.cast::<pyo3::types::PyString>() {
        Ok(s) => s.to_str().is_ok_and(|t| t.as_bytes() == PARAM_COMMS_NAME),
        Err(_) => false,
    })
}

fn int_error(value: &Bound<'_, PyAny>, field: usize) -> PyErr {
    PyTypeError::new_err(format!(
        "{} must be an int in the signed 64-bit range, got {} {}",
        CALLS[field],
        type_name(value),
        value.repr().map(|r| r.to_string()).unwrap_or_default()
    ))
}

/// The first pass over activities `lo..hi` of `list`: (device, resource id, timestamp,
/// duration) of each, in order.
pub(crate) fn read_timings(
    py: Python<'_>,
    acc: &Accessors,
    list: &Bound<'_, PyList>,
    lo: usize,
    hi: usize,
) -> PyResult<Vec<[i64; 4]>> {
    let mut reader = Reader::new(py, acc, list, lo, hi)?;
    let mut out = Vec::with_capacity(hi - lo);
    for i in lo..hi {
        let row = reader.row(i)?;
        out.push([
            reader.int(&row, DEVICE)?,
            reader.int(&row, RESOURCE)?,
            reader.int(&row, TIMESTAMP)?,
            reader.int(&row, DURATION)?,
        ]);
    }
    Ok(out)
}

/// The second pass over activities `lo..hi` of `list`, as the batch starting at activity
/// `start` of the first pass: every field the format needs, and only those.
pub(crate) fn read_batch(
    py: Python<'_>,
    acc: &Accessors,
    list: &Bound<'_, PyList>,
    lo: usize,
    hi: usize,
    start: usize,
) -> PyResult<Batch> {
    let mut reader = Reader::new(py, acc, list, lo, hi)?;
    let n = hi - lo;
    let mut batch = Batch {
        start,
        categories: StrColumn::with_capacity(n, n * 8),
        names: StrColumn::with_capacity(n, n * 24),
        metadata: StrColumn::with_capacity(n, n * 160),
        linked_correlation_ids: Vec::with_capacity(n),
        flow_ids: Vec::with_capacity(n),
        ..Batch::default()
    };
    for i in lo..hi {
        let row = reader.row(i)?;
        reader.string(&row, CATEGORY, &mut batch.categories)?;
        let linked = reader.int(&row, LINKED_ID)?;
        let flow_id = reader.int(&row, FLOW_ID)?;
        batch.linked_correlation_ids.push(linked);
        batch.flow_ids.push(flow_id);
        reader.string(&row, NAME, &mut batch.names)?;
        reader.string(&row, METADATA, &mut batch.metadata)?;
        let category = batch.categories.get(batch.categories.len() - 1);
        let needs_correlation = needs_correlation_id(category, linked);
        let kernel = is_kernel(category);
        if needs_correlation {
            batch.correlation_ids.push(reader.int(&row, CORRELATION)?);
        }
        if flow_id > 0 {
            let flow_type = reader.int(&row, FLOW_TYPE)?;
            let start = reader.get(&row, FLOW_START)?.is_truthy()?;
            batch.flows.push(Flow { flow_type, start });
        }
        if kernel {
            reader.comms_metadata(&row, &mut batch.comms_metadata)?;
        }
    }
    Ok(batch)
}

/// Reads what an export reads and keeps nothing: the accessor floor of `kinetrace demo`
/// (`kinetrace._bench`) drives the extraction passes into it.
#[pyclass(module = "kinetrace._kinetrace", name = "_Discard", frozen)]
struct Discard;

#[pymethods]
impl Discard {
    #[new]
    fn new() -> Self {
        Discard
    }

    /// As `_Exporter.read_first_pass`, keeping nothing.
    fn read_first_pass(
        &self,
        py: Python<'_>,
        accessors: &Accessors,
        activities: &Bound<'_, PyList>,
        lo: usize,
        hi: usize,
    ) -> PyResult<()> {
        read_timings(py, accessors, activities, lo, hi).map(drop)
    }

    /// As `_Exporter.read_batch`, keeping nothing.
    fn read_batch(
        &self,
        py: Python<'_>,
        accessors: &Accessors,
        activities: &Bound<'_, PyList>,
        lo: usize,
        hi: usize,
    ) -> PyResult<()> {
        read_batch(py, accessors, activities, lo, hi, 0).map(drop)
    }
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Accessors>()?;
    m.add_class::<Discard>()?;
    m.add_function(wrap_pyfunction!(common_type, m)?)?;
    Ok(())
}
