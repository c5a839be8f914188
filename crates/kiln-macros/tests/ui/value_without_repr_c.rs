#[derive(Clone, Copy, kiln_macros::Value)]
struct Particle {
    x: f32,
    y: f32,
}

fn main() {}
