//! The test kit's guide (docs/testing.md) covers what the kit exports.

/// Rule: docs/testing.md is the test kit's guide (`testkit::guide`): it presents every probe
/// the crate exports and documents (testkit.rs) — a row for `OwnerProbe`, `probe_children`
/// and `kill_when` — and never says the probes are "not built yet".
#[test]
fn the_guide_lists_the_owner_probe_probe_children_and_kill_when() {
    let guide = include_str!("../../docs/testing.md");
    assert!(
        !guide.contains("not built yet"),
        "the guide says the probes are not built yet"
    );
    for item in ["OwnerProbe", "probe_children", "kill_when"] {
        assert!(guide.contains(item), "the guide never mentions {item}");
    }
}
