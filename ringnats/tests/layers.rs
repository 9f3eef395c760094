//! The client's layering, checked against its own source by the workspace's `layering` crate:
//! every import points down the layers of `ringnats/ARCHITECTURE.md`, the modules form no
//! import cycle, and the document's list of known back-edges names exactly the edges that still
//! break those rules. `src/protocol/tests.rs` exists only for tests.

fn ringnats() -> layering::Crate {
    layering::Crate::new(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn every_import_points_down_the_layers_of_architecture_md() {
    ringnats().assert_imports_point_down();
}

#[test]
fn the_modules_form_no_import_cycle_but_through_a_listed_back_edge() {
    ringnats().assert_no_cycle();
}

#[test]
fn every_listed_back_edge_still_breaks_a_rule() {
    ringnats().assert_back_edges_still_break_a_rule();
}
