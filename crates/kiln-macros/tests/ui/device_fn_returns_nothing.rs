#[kiln_macros::device]
fn log_value(x: f32) {
    let y = x * 2.0;
}

fn main() {}
