//! clshim: an OpenCL interposer that times program builds and binary queries.
