//! For the agent-tree runtime, not a stable API: what `agent-tree-actors` needs of the
//! protocol and no application does. Hidden from the docs; anything here may change or go in
//! any release.
//!
//! * [`RecordStore`]: where the fold keeps records, so that the registry folds into shared
//!   `Arc<AgentRecord>`s, changed copy-on-write.
//! * [`LineSpan`]: where a journal line is, as the journal's writer indexes it.
//! * [`torn_header`]: whether a file holds only what a crash left of a journal's header.
//! * [`ListValue`] and [`split_list`]: a list field's value before the words rule gives it a
//!   meaning, and its comma split, which the agent-file reader hands what it read to.
//! * [`is_delegation_entry`]: whether a tool name is a Claude Code delegation entry.

pub use crate::fold::RecordStore;
pub use crate::journal::{LineSpan, torn_header};
pub use crate::words::{ListValue, is_delegation_entry, split_list};
