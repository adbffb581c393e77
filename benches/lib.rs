//! The benches of `agent-tree` (`cargo bench -p agent-tree-benches`): each scenario with a raw
//! ractor and a raw tokio baseline in the same criterion group, so ratios come from one run.
//! The package holds no library code of its own.
