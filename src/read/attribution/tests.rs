use std::path::Path;

use super::*;

/// Two nested operators on thread 1 launching two overlapping kernels through flows, an
/// operator that bleeds 0.5 µs past its parent (kept) and one that overruns it by 2 µs
/// (left out), a graph launch owning two kernels of its correlation, and a backward frame
/// on thread 2 linked by sequence number to the later of two forward operators.
const TRACE: &str = r#"{"traceEvents": [
 {"ph": "X", "cat": "cpu_op", "name": "aten::linear", "pid": 1, "tid": 1, "ts": 0, "dur": 100, "args": {"Sequence number": 7, "Input Dims": [[2, 3]]}},
 {"ph": "X", "cat": "cpu_op", "name": "aten::addmm", "pid": 1, "tid": 1, "ts": 10, "dur": 50, "args": {"Sequence number": 7, "Input type": ["float"]}},
 {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 20, "dur": 5, "args": {"correlation": 11}},
 {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 30, "dur": 5, "args": {"correlation": 12}},
 {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": 11, "pid": 1, "tid": 1, "ts": 20},
 {"ph": "f", "cat": "ac2g", "name": "ac2g", "id": 11, "pid": 0, "tid": 7, "ts": 200, "bp": "e"},
 {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": 12, "pid": 1, "tid": 1, "ts": 30},
 {"ph": "f", "cat": "ac2g", "name": "ac2g", "id": 12, "pid": 0, "tid": 7, "ts": 205, "bp": "e"},
 {"ph": "X", "cat": "kernel", "name": "k1", "pid": 0, "tid": 7, "ts": 200, "dur": 10.5, "args": {"correlation": 11}},
 {"ph": "X", "cat": "kernel", "name": "k2", "pid": 0, "tid": 7, "ts": 205, "dur": 10, "args": {"correlation": 12}},
 {"ph": "X", "cat": "cpu_op", "name": "aten::bleeds", "pid": 1, "tid": 1, "ts": 90, "dur": 10.5},
 {"ph": "X", "cat": "cpu_op", "name": "aten::overruns", "pid": 1, "tid": 1, "ts": 95, "dur": 7},
 {"ph": "X", "cat": "cpu_op", "name": "graphed", "pid": 1, "tid": 1, "ts": 300, "dur": 10},
 {"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "pid": 1, "tid": 1, "ts": 301, "dur": 2, "args": {"correlation": 20}},
 {"ph": "X", "cat": "kernel", "name": "g1", "pid": 0, "tid": 7, "ts": 400, "dur": 1, "args": {"correlation": 20}},
 {"ph": "X", "cat": "gpu_memset", "name": "g2", "pid": 0, "tid": 8, "ts": 400.5, "dur": 1, "args": {"correlation": 20}},
 {"ph": "X", "cat": "cpu_op", "name": "autograd::engine::evaluate_function: AddmmBackward0", "pid": 1, "tid": 2, "ts": 500, "dur": 10, "args": {"Sequence number": 7}}
]}"#;

fn attributed(text: &str) -> Attribution {
    attributed_with(text, Links::default())
}

fn attributed_with(text: &str, links: Links) -> Attribution {
    let scratch = crate::testing::scratch("attribution");
    let dir: &Path = &scratch;
    let path = dir.join("t.json");
    std::fs::write(&path, text).unwrap();
    attribute(&path, ReadOptions::default(), links, &mut |_| Ok(())).unwrap()
}

fn op<'a>(a: &'a Attribution, name: &str) -> &'a Op {
    a.ops.iter().find(|o| a.name(o) == name).unwrap()
}

/// The index of the operator called `name`.
fn at(a: &Attribution, name: &str) -> u32 {
    a.ops.iter().position(|o| a.name(o) == name).unwrap() as u32
}

#[test]
fn operators_own_their_subtrees_kernels_as_busy_time() {
    let a = attributed(TRACE);
    let (linear, addmm) = (op(&a, "aten::linear"), op(&a, "aten::addmm"));
    assert_eq!(addmm.parent(), Some(0));
    assert_eq!((linear.uid, addmm.uid), (0, 1));
    let (linear_gpu, addmm_gpu) = (a.gpu(at(&a, "aten::linear")), a.gpu(at(&a, "aten::addmm")));
    assert_eq!(linear_gpu, addmm_gpu);
    assert_eq!(addmm_gpu.len(), 2);
    // k1 [200, 210.5], k2 [205, 215]: busy 15 µs, not the summed 20.5.
    assert_eq!(tree::busy_ns(&a.gpu, &addmm_gpu), 15_000);
    assert_eq!(tree::busy_us_float(&a.gpu_details, &addmm_gpu), 15.0);
    // The texts in one form, the whitespace between tokens dropped.
    assert_eq!(a.args(linear).input_dims.as_deref(), Some("[[2,3]]"));
    assert_eq!(a.args(addmm).input_type.as_deref(), Some("[\"float\"]"));
}

#[test]
fn a_child_may_bleed_under_a_microsecond_past_its_parent() {
    let a = attributed(TRACE);
    assert_eq!(op(&a, "aten::bleeds").parent(), Some(0));
    assert_eq!(op(&a, "aten::overruns").parent(), None);
}

#[test]
fn a_graph_launch_owns_every_activity_of_its_correlation() {
    let a = attributed(TRACE);
    let graphed = a.gpu(at(&a, "graphed"));
    assert_eq!(graphed.len(), 2);
    assert_eq!(tree::busy_ns(&a.gpu, &graphed), 1_500);
}

/// An MTIA trace's shape: the runtime's calls are not named launches, its activities are
/// `mtia_ccp_events` (a DMA without a link beside them); and the 2021 format's categories.
const MTIA: &str = r#"{"traceEvents": [
 {"ph": "X", "cat": "cpu_op", "name": "aten::permute", "pid": 1, "tid": 1, "ts": 0, "dur": 100},
 {"ph": "X", "cat": "mtia_runtime", "name": "recordEvent", "pid": 1, "tid": 1, "ts": 5, "dur": 2, "args": {"correlation": 3}},
 {"ph": "X", "cat": "mtia_runtime", "name": "runFunction - job_prep_and_submit_for_execution", "pid": 1, "tid": 1, "ts": 10, "dur": 20, "args": {"correlation": 4}},
 {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": 4, "pid": 1, "tid": 1, "ts": 10},
 {"ph": "f", "cat": "ac2g", "name": "ac2g", "id": 4, "pid": 9, "tid": 408, "ts": 200, "bp": "e"},
 {"ph": "X", "cat": "mtia_ccp_events", "name": "permute_2d", "pid": 9, "tid": 408, "ts": 200, "dur": 30, "args": {"correlation": 4, "stream": 102}},
 {"ph": "X", "cat": "mtia_ccp_events", "name": "dma_request", "pid": 9, "tid": 801, "ts": 205, "dur": 8, "args": {"sqid": 1}},
 {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 2, "ts": 0, "dur": 100},
 {"ph": "X", "cat": "Runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 2, "ts": 10, "dur": 5, "args": {"correlation": 8}},
 {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": 8, "pid": 1, "tid": 2, "ts": 10},
 {"ph": "f", "cat": "ac2g", "name": "ac2g", "id": 8, "pid": 0, "tid": 7, "ts": 300, "bp": "e"},
 {"ph": "X", "cat": "Kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 300, "dur": 12, "args": {"correlation": 8}}
]}"#;

#[test]
fn mtia_and_2021_format_activities_are_owned_as_summary_counts_them() {
    let a = attributed(MTIA);
    let owned = |name: &str| -> Vec<&str> {
        a.gpu(at(&a, name))
            .iter()
            .map(|&g| &*a.names[a.gpu[g as usize].name as usize])
            .collect()
    };
    assert_eq!(owned("aten::permute"), ["permute_2d"]);
    assert_eq!(owned("aten::mm"), ["gemm"]);
    // With no call named a launch, the first runtime call with a link value decides: here
    // `correlation`; were it `External id`, the flows would link by that, and no flow
    // here would: through the flows alone nothing is owned, and by correlation (as
    // `summary` reads the launches) all is.
    let by_external = MTIA
        .replace("{\"correlation\": 3}", "{\"External id\": 3}")
        .replace("cudaLaunchKernel", "cudaKernelRun");
    let a = attributed_with(&by_external, Links::Flows);
    assert!(a.gpu(at(&a, "aten::permute")).is_empty());
    assert!(a.gpu(at(&a, "aten::mm")).is_empty());
    let a = attributed(&by_external);
    assert_eq!(a.gpu(at(&a, "aten::permute")).len(), 1);
    assert_eq!(a.gpu(at(&a, "aten::mm")).len(), 1);
}

/// A ROCm trace's shape (MI300, `hipMemsetAsync` in `aten::sum`): the memset's flow is
/// written as two ends and no start; a kernel whose flow is fine beside it; an activity
/// whose correlation two calls carry (the first in file order launched it), and one whose
/// correlation no call carries.
const BROKEN_FLOWS: &str = r#"{"traceEvents": [
 {"ph": "X", "cat": "cpu_op", "name": "aten::sum", "pid": 1, "tid": 1, "ts": 0, "dur": 100},
 {"ph": "X", "cat": "cuda_runtime", "name": "hipMemsetAsync", "pid": 1, "tid": 1, "ts": 10, "dur": 5, "args": {"correlation": 478}},
 {"ph": "f", "cat": "ac2g", "name": "ac2g", "id": 478, "pid": 1, "tid": 1, "ts": 10, "bp": "e"},
 {"ph": "X", "cat": "cuda_runtime", "name": "hipLaunchKernel", "pid": 1, "tid": 1, "ts": 20, "dur": 5, "args": {"correlation": 479}},
 {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": 479, "pid": 1, "tid": 1, "ts": 20},
 {"ph": "f", "cat": "ac2g", "name": "ac2g", "id": 479, "pid": 2, "tid": 0, "ts": 300, "bp": "e"},
 {"ph": "X", "cat": "cpu_op", "name": "aten::copy_", "pid": 1, "tid": 1, "ts": 200, "dur": 50},
 {"ph": "X", "cat": "cuda_runtime", "name": "hipMemcpyAsync", "pid": 1, "tid": 1, "ts": 210, "dur": 5, "args": {"correlation": 500}},
 {"ph": "X", "cat": "cpu_op", "name": "aten::fill_", "pid": 1, "tid": 3, "ts": 200, "dur": 50},
 {"ph": "X", "cat": "cuda_runtime", "name": "hipMemcpyAsync", "pid": 1, "tid": 3, "ts": 220, "dur": 5, "args": {"correlation": 500}},
 {"ph": "X", "cat": "gpu_memset", "name": "Memset (Device)", "pid": 2, "tid": 0, "ts": 290, "dur": 2, "args": {"correlation": 478}},
 {"ph": "f", "cat": "ac2g", "name": "ac2g", "id": 478, "pid": 2, "tid": 0, "ts": 290, "bp": "e"},
 {"ph": "X", "cat": "kernel", "name": "reduce_kernel", "pid": 2, "tid": 0, "ts": 300, "dur": 8, "args": {"correlation": 479}},
 {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoD", "pid": 2, "tid": 1, "ts": 400, "dur": 3, "args": {"correlation": 500}},
 {"ph": "X", "cat": "kernel", "name": "stray", "pid": 2, "tid": 0, "ts": 500, "dur": 3, "args": {"correlation": 999}}
]}"#;

#[test]
fn an_activity_no_flow_reaches_is_its_correlations_first_launchs() {
    let a = attributed(BROKEN_FLOWS);
    let owned = |a: &Attribution, name: &str| -> Vec<String> {
        a.gpu(at(a, name))
            .iter()
            .map(|&g| a.names[a.gpu[g as usize].name as usize].to_string())
            .collect()
    };
    assert_eq!(owned(&a, "aten::sum"), ["Memset (Device)", "reduce_kernel"]);
    assert_eq!(owned(&a, "aten::copy_"), ["Memcpy DtoD"]);
    assert!(owned(&a, "aten::fill_").is_empty());
    // The stray kernel has no launch: no operator owns it, and it is not kept.
    assert_eq!(a.gpu.len(), 3);
    // TraceLens's reading: the flows alone.
    let a = attributed_with(BROKEN_FLOWS, Links::Flows);
    assert_eq!(owned(&a, "aten::sum"), ["reduce_kernel"]);
    assert!(owned(&a, "aten::copy_").is_empty());
}

#[test]
fn a_pass_for_groups_keeps_the_tree_and_times_but_no_rows_detail() {
    let scratch = crate::testing::scratch("attribution-groups");
    let path = scratch.join("t.json");
    std::fs::write(&path, TRACE).unwrap();
    let mut collected = Collected::new(Keep::Groups);
    read_trace_with(
        &path,
        &mut collected,
        &mut |_| Ok(()),
        ReadOptions::default(),
    )
    .unwrap();
    let lean = tree::build(collected);
    let full = attributed(TRACE);
    assert!(lean.gpu_details.is_empty());
    assert_eq!(full.gpu_details.len(), full.gpu.len());
    let spans = |a: &Attribution| -> Vec<_> {
        (0..a.ops.len() as u32)
            .map(|i| {
                let op = &a.ops[i as usize];
                let gpu: Vec<_> = a.gpu(i).iter().map(|&g| a.gpu[g as usize].start).collect();
                (
                    op.start,
                    op.self_ns,
                    op.parent(),
                    a.own_gpu(i).to_vec(),
                    gpu,
                )
            })
            .collect()
    };
    assert_eq!(spans(&lean), spans(&full));
    // Only the backward links need the sequence numbers.
    let addmm = at(&full, "aten::addmm");
    assert_eq!(full.backward(addmm).len(), 1);
    assert!(lean.backward(addmm).is_empty());
}

#[test]
fn a_backward_frame_links_to_the_latest_forward_of_its_number() {
    let a = attributed(TRACE);
    let frame = at(&a, "autograd::engine::evaluate_function: AddmmBackward0");
    assert_eq!(a.backward(at(&a, "aten::addmm")), [frame]);
    assert!(a.backward(at(&a, "aten::linear")).is_empty());
}

#[test]
fn launches_link_by_external_id_when_the_first_launch_has_no_correlation() {
    let text = TRACE
        .replace("\"correlation\": 11}", "\"External id\": 11}")
        .replace("\"correlation\": 12}", "\"External id\": 12}");
    let a = attributed_with(&text, Links::Flows);
    assert_eq!(a.gpu(at(&a, "aten::addmm")).len(), 2);
    // The graph launch's correlation is no link value of the flows then; `summary` reads
    // the launch of an activity by correlation all the same.
    assert!(a.gpu(at(&a, "graphed")).is_empty());
    let a = attributed(&text);
    assert_eq!(a.gpu(at(&a, "graphed")).len(), 2);
}

#[test]
fn device_properties_entries_are_read() {
    let raw = br#"[{"id": 0, "name": "NVIDIA H100 {x} \"80GB\"", "totalGlobalMem": 85045215232, "numSms": 132, "x": [1, {"a": 2}]},
        {"id": 1, "name": "AMD Instinct MI300X"}]"#;
    let found = super::collect::devices_of(raw);
    assert_eq!(found.len(), 2);
    assert_eq!(found[0].id, Some(0));
    assert_eq!(found[0].name, "NVIDIA H100 {x} \"80GB\"");
    assert_eq!(found[0].total_memory, Some(85045215232));
    assert_eq!(found[0].sms, Some(132));
    assert_eq!((found[1].id, found[1].sms), (Some(1), None));
    assert!(super::collect::devices_of(b"{}").is_empty());
}

#[test]
fn self_time_is_the_duration_less_the_nested_operators() {
    let a = attributed(TRACE);
    // aten::linear [0, 100] holds addmm [10, 60] and bleeds [90, 100.5] (clipped at 100):
    // 100 - 50 - 10 = 40 µs; overruns is out of the tree, so it takes nothing off.
    assert_eq!(op(&a, "aten::linear").self_ns, 40_000);
    assert_eq!(op(&a, "aten::addmm").self_ns, 50_000);
    assert_eq!(op(&a, "aten::bleeds").self_ns, 10_500);
}

#[test]
fn own_gpu_goes_to_the_innermost_operator_only() {
    let a = attributed(TRACE);
    assert_eq!(a.own_gpu(at(&a, "aten::addmm")).len(), 2);
    assert!(a.own_gpu(at(&a, "aten::linear")).is_empty());
    assert_eq!(a.own_gpu(at(&a, "graphed")).len(), 2);
}

#[test]
fn groups_sum_self_and_own_gpu_time_with_the_top_kernel() {
    let a = attributed(TRACE);
    let found = groups::groups(&a);
    let addmm = found.iter().find(|g| g.name == "aten::addmm").unwrap();
    assert_eq!(
        (addmm.count, addmm.self_ns, addmm.gpu_ns),
        (1, 50_000, 15_000)
    );
    assert_eq!(addmm.input_type, "[\"float\"]");
    // k1 ran 10.5 µs, k2 10 µs.
    assert_eq!(addmm.top_kernel, Some(("k1".to_string(), 10_500)));
    let linear = found.iter().find(|g| g.name == "aten::linear").unwrap();
    assert_eq!((linear.gpu_ns, linear.top_kernel.clone()), (0, None));
    assert_eq!(linear.input_dims, "[[2,3]]");
}

#[test]
fn a_damaged_trace_groups_as_far_as_it_reads() {
    let scratch = crate::testing::scratch("attribution-damaged");
    let path = scratch.join("t.json");
    let cut = TRACE.find("aten::bleeds").unwrap();
    std::fs::write(&path, &TRACE[..cut]).unwrap();
    assert!(attribute(
        &path,
        ReadOptions::default(),
        Links::default(),
        &mut |_| Ok(())
    )
    .is_err());
    let scan = |v: &mut dyn crate::read::events::Visitor| {
        crate::read::events::scan_trace(&path, v, &mut |_| Ok(()), ReadOptions::default())
    };
    let (end, (), a) = groups::attributed_beside(scan, |_, _| ()).unwrap();
    let found = groups::groups(&a);
    assert!(end.invalid.is_some());
    // Both of its kernels were read before the damage.
    let addmm = found.iter().find(|g| g.name == "aten::addmm").unwrap();
    assert_eq!((addmm.count, addmm.gpu_ns), (1, 15_000));
    assert!(found.iter().all(|g| g.name != "graphed"));
}

#[test]
fn operators_share_equal_argument_texts() {
    let trace = r#"{"traceEvents": [
 {"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 0, "dur": 1, "args": {"Input Dims": [[2, 3]], "Input type": ["float"]}},
 {"ph": "X", "cat": "cpu_op", "name": "b", "pid": 1, "tid": 1, "ts": 2, "dur": 1, "args": {"Input Dims": [[2, 3]], "Input type": ["int"]}},
 {"ph": "X", "cat": "cpu_op", "name": "c", "pid": 1, "tid": 1, "ts": 4, "dur": 1, "args": {"Input Dims": [[4]]}},
 {"ph": "X", "cat": "cpu_op", "name": "d", "pid": 1, "tid": 1, "ts": 6, "dur": 1, "args": {"Input Dims": [
   [2,
    3]
 ]}}
]}"#;
    let a = attributed(trace);
    let dims = |name: &str| a.args(op(&a, name)).input_dims.clone().unwrap();
    let types = |name: &str| a.args(op(&a, name)).input_type.clone().unwrap();
    // One copy of "[[2,3]]" for both operators, and for the one that prints it over lines;
    // unequal texts stay apart.
    assert!(std::sync::Arc::ptr_eq(&dims("a"), &dims("b")));
    assert!(std::sync::Arc::ptr_eq(&dims("a"), &dims("d")));
    assert_eq!((&*dims("a"), &*dims("c")), ("[[2,3]]", "[[4]]"));
    assert_eq!((&*types("a"), &*types("b")), ("[\"float\"]", "[\"int\"]"));
}

/// A launch's flow with two ends and three activities of its link value: through the flows
/// alone the last end's thread counts, and of that thread's activities the last in file
/// order (as maps filled in file order had them); by correlation the other two are the
/// launch's too. Activities no operator launched are not kept.
const TWO_ENDS: &str = r#"{"traceEvents": [
 {"ph": "X", "cat": "cpu_op", "name": "op", "pid": 1, "tid": 1, "ts": 0, "dur": 100},
 {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 10, "dur": 5, "args": {"correlation": 5}},
 {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": 5, "pid": 1, "tid": 1, "ts": 10},
 {"ph": "f", "cat": "ac2g", "name": "ac2g", "id": 5, "pid": 0, "tid": 7, "ts": 200, "bp": "e"},
 {"ph": "f", "cat": "ac2g", "name": "ac2g", "id": 5, "pid": 0, "tid": 8, "ts": 200, "bp": "e"},
 {"ph": "X", "cat": "kernel", "name": "on7", "pid": 0, "tid": 7, "ts": 200, "dur": 1, "args": {"correlation": 5}},
 {"ph": "X", "cat": "kernel", "name": "first8", "pid": 0, "tid": 8, "ts": 200, "dur": 1, "args": {"correlation": 5}},
 {"ph": "X", "cat": "kernel", "name": "last8", "pid": 0, "tid": 8, "ts": 300, "dur": 2, "args": {"correlation": 5, "device": 3}},
 {"ph": "X", "cat": "kernel", "name": "unlaunched", "pid": 0, "tid": 8, "ts": 400, "dur": 1, "args": {"correlation": 6, "device": 4}},
 {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 500, "dur": 5, "args": {"correlation": 9}},
 {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": 9, "pid": 1, "tid": 1, "ts": 500},
 {"ph": "f", "cat": "ac2g", "name": "ac2g", "id": 9, "pid": 0, "tid": 7, "ts": 600, "bp": "e"},
 {"ph": "X", "cat": "kernel", "name": "no_operator", "pid": 0, "tid": 7, "ts": 600, "dur": 1, "args": {"correlation": 9}}
]}"#;

#[test]
fn the_last_flow_end_and_the_last_activity_of_its_thread_count() {
    let a = attributed_with(TWO_ENDS, Links::Flows);
    let own = a.own_gpu(at(&a, "op"));
    assert_eq!(own.len(), 1);
    let g = &a.gpu[own[0] as usize];
    assert_eq!(&*a.names[g.name as usize], "last8");
    assert_eq!(a.gpu_details[own[0] as usize].uid, 7);
    assert_eq!(a.device(g), Some(3));
}

#[test]
fn only_the_activities_operators_launched_are_kept() {
    let names = |a: &Attribution| -> Vec<String> {
        a.gpu
            .iter()
            .map(|g| a.names[g.name as usize].to_string())
            .collect()
    };
    let a = attributed_with(TWO_ENDS, Links::Flows);
    assert_eq!(names(&a), ["last8"]);
    assert_eq!(a.gpu(at(&a, "op")), [0]);
    let a = attributed(TWO_ENDS);
    assert_eq!(names(&a), ["on7", "first8", "last8"]);
    assert_eq!(a.gpu(at(&a, "op")), [0, 1, 2]);
}

#[test]
fn subtrees_hold_their_descendants_own_activities_once() {
    let a = attributed(TRACE);
    let (linear, addmm) = (at(&a, "aten::linear"), at(&a, "aten::addmm"));
    assert_eq!(a.children(linear), [addmm, at(&a, "aten::bleeds")]);
    assert!(a.has_gpu(linear) && !a.has_gpu(at(&a, "aten::bleeds")));
    // The union of the subtrees of addmm and linear: addmm's two kernels, once each.
    assert_eq!(a.union_gpu(&[linear, addmm]), a.own_gpu(addmm));
    assert_eq!(a.backward_gpu(addmm), Vec::<u32>::new());
}

#[test]
fn operators_with_equal_arguments_share_one_set() {
    let text = r#"{"traceEvents": [
 {"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 0, "dur": 1, "args": {"Input Dims": [[2, 3]], "Input type": ["float"]}},
 {"ph": "X", "cat": "cpu_op", "name": "b", "pid": 1, "tid": 1, "ts": 2, "dur": 1, "args": {"Input type": ["float"], "Input Dims": [[2, 3]]}},
 {"ph": "X", "cat": "cpu_op", "name": "c", "pid": 1, "tid": 1, "ts": 4, "dur": 1, "args": {"Input Dims": [[2, 3]]}},
 {"ph": "X", "cat": "cpu_op", "name": "d", "pid": 1, "tid": 1, "ts": 6, "dur": 1}
]}"#;
    let a = attributed(text);
    let set = |name: &str| op(&a, name).args;
    assert_eq!(set("a"), set("b"));
    assert_ne!(set("a"), set("c"));
    assert_eq!(a.arg_sets.len(), 3);
    assert!(a.args(op(&a, "d")).input_dims.is_none());
    assert_eq!(a.args(op(&a, "c")).input_dims.as_deref(), Some("[[2,3]]"));
}

/// The records a big trace has millions of stay their size (docs/parquet.md counts them).
#[test]
fn records_keep_their_sizes() {
    use std::mem::size_of;
    assert_eq!(size_of::<Op>(), 48);
    assert_eq!(size_of::<super::collect::Runtime>(), 48);
    assert_eq!(size_of::<GpuEvent>(), 24);
    assert_eq!(size_of::<GpuDetail>(), 24);
    assert_eq!(size_of::<super::collect::GpuLink>(), 32);
}
