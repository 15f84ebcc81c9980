//! Kernel sources that several test files build, so that the hashes and lengths they
//! expect in trace records come from one definition. `variant` varies one constant of
//! the source, which makes each build's source (and so its hash) distinct.

/// One kernel `square`: out[i] = i * i + variant (tests/c/basic.c's kernel, with the variant).
pub fn basic_source(variant: &str) -> String {
    format!(
        "__kernel void square(__global int *out) {{\n    int i = get_global_id(0);\n    \
         out[i] = i * i + {variant};\n}}\n"
    )
}

/// One kernel `cube`: out[i] = i * i * i + variant.
pub fn cube_source(variant: &str) -> String {
    format!(
        "__kernel void cube(__global int *out) {{\n    int i = get_global_id(0);\n    \
         out[i] = i * i * i + {variant};\n}}\n"
    )
}

/// Two kernels `fake_a` and `fake_b`, as the fake driver's clients build them.
pub fn fake_source(variant: &str) -> String {
    format!(
        "__kernel void fake_a(__global int *o) {{ o[0] = {variant}; }}\n\
         __kernel void fake_b(__global int *o) {{ o[1] = 2; }}\n"
    )
}
