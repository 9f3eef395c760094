//! The macros crate's layering, checked against its own source by the workspace's `layering`
//! crate: every import points down the layers of `macros/ARCHITECTURE.md` and the modules form
//! no import cycle.

fn macros() -> layering::Crate {
    layering::Crate::new(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn every_import_points_down_the_layers_of_architecture_md() {
    macros().assert_imports_point_down();
}

#[test]
fn the_modules_form_no_import_cycle_but_through_a_listed_back_edge() {
    macros().assert_no_cycle();
}

#[test]
fn every_listed_back_edge_still_breaks_a_rule() {
    macros().assert_back_edges_still_break_a_rule();
}
