//! What the native store says, in words, of the devices and driver builds its entries and
//! requests were made for. Entries and requests name them only by 64-bit ids (a device's
//! fingerprint, a driver build's identity), so whoever leaves one (the library when it
//! leaves a request, the warm worker when it makes an entry) also leaves a small text file
//! for each, `devices/<fingerprint>.txt` and `drivers/<driver>.txt`, for `clshim store` to
//! print. This module owns their format: a first line naming the kind and the id, then
//! `field: value` lines, each value on one line and bounded. It also names the other file
//! of `drivers/`, `<driver>.files` (what the driver build reads for any program, which the
//! warm worker keeps), by its magic. A label only helps a reader: nothing is decided on it.

/// The folder of device labels inside a store.
pub const DEVICES: &str = "devices";
/// The folder of driver labels, and of what each driver build reads for any program,
/// inside a store.
pub const DRIVERS: &str = "drivers";
/// The first bytes of `drivers/<driver>.files` when it holds what a whole build reads: the
/// front end's files and what the link reads (pocl's kernel library). Version 2, learned in
/// an environment without the user's extra build flags.
pub const DRIVER_FILES_MAGIC: &[u8; 8] = b"CLSHIMD2";
/// The first bytes of `drivers/<driver>.files` when it holds what the front end reads (a
/// compile without its link: pocl's headers) and pocl's kernel library found beside those
/// headers, as the warm worker learns it first (one without the library is learnt again).
pub const DRIVER_FILES_FRONT_END_MAGIC: &[u8; 8] = b"CLSHIMD3";
/// Version 1's, which the worker no longer trusts (a header the user's flags force-included
/// could be among its files) and `clshim store` still knows as clshim's.
pub const DRIVER_FILES_MAGIC_V1: &[u8; 8] = b"CLSHIMDF";
/// The longest label a reader takes: far beyond a device's few lines.
pub const MAX_LABEL: u64 = 64 << 10;
/// The longest value a label keeps: device names and library paths fit with room to spare.
const MAX_VALUE: usize = 1024;

/// The name of `devices/`'s label of the device with this fingerprint.
pub fn device_label_name(fingerprint: u64) -> String {
    format!("{fingerprint:016x}.txt")
}

/// The name of `drivers/`'s label of the driver build with this identity.
pub fn driver_label_name(driver: u64) -> String {
    format!("{driver:016x}.txt")
}

/// The name of `drivers/`'s list of what the driver build with this identity reads for
/// any program.
pub fn driver_files_name(driver: u64) -> String {
    format!("{driver:016x}.files")
}

/// A device as OpenCL names it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeviceLabel {
    pub name: String,
    /// `CPU`, `GPU`, `accelerator` or the like.
    pub kind: String,
    pub platform: String,
    pub platform_version: String,
    pub device_version: String,
    /// `CL_DRIVER_VERSION`.
    pub driver_version: String,
}

/// A driver build: the library behind the device, and the compiler libraries loaded with
/// it, each with its GNU build-id (hex; None: it has none, and is known by its path, size,
/// times and inode).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DriverLabel {
    pub library: String,
    pub build_id: Option<String>,
    /// (file name, build-id).
    pub compilers: Vec<(String, Option<String>)>,
}

/// `value` on one line (control characters as spaces), at most [`MAX_VALUE`] characters:
/// a device name is the driver's text, and a label must stay one field a line.
fn one_line(value: &str) -> String {
    value
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(MAX_VALUE)
        .collect::<String>()
        .trim()
        .to_string()
}

fn first_line(kind: &str, id: u64) -> String {
    format!("clshim {kind} {id:016x}")
}

/// The `field: value` pairs of a label whose first line names `kind` and `id`; None for
/// any other text.
fn fields<'a>(text: &'a str, kind: &str, id: u64) -> Option<Vec<(&'a str, &'a str)>> {
    let mut lines = text.lines();
    if lines.next()? != first_line(kind, id) {
        return None;
    }
    Some(
        lines
            .filter_map(|l| l.split_once(": "))
            .map(|(f, v)| (f, v.trim()))
            .collect(),
    )
}

fn id_or_none(id: &Option<String>) -> &str {
    id.as_deref().unwrap_or("none")
}

fn parse_id(v: &str) -> Option<String> {
    (v != "none" && !v.is_empty()).then(|| v.to_string())
}

impl DeviceLabel {
    /// The text of `devices/<fingerprint>.txt`.
    pub fn encode(&self, fingerprint: u64) -> String {
        let mut out = first_line("device", fingerprint) + "\n";
        for (field, value) in [
            ("name", &self.name),
            ("type", &self.kind),
            ("platform", &self.platform),
            ("platform version", &self.platform_version),
            ("device version", &self.device_version),
            ("driver version", &self.driver_version),
        ] {
            out.push_str(&format!("{field}: {}\n", one_line(value)));
        }
        out
    }

    /// The label in `text` if it is the one of the device `fingerprint`.
    pub fn parse(text: &str, fingerprint: u64) -> Option<DeviceLabel> {
        let mut l = DeviceLabel::default();
        for (field, value) in fields(text, "device", fingerprint)? {
            let slot = match field {
                "name" => &mut l.name,
                "type" => &mut l.kind,
                "platform" => &mut l.platform,
                "platform version" => &mut l.platform_version,
                "device version" => &mut l.device_version,
                "driver version" => &mut l.driver_version,
                _ => continue,
            };
            *slot = value.to_string();
        }
        Some(l)
    }

    /// The device in one line: `name (platform; driver driver_version)`.
    pub fn describe(&self) -> String {
        format!(
            "{} ({}; driver {})",
            self.name, self.platform, self.driver_version
        )
    }
}

impl DriverLabel {
    /// The text of `drivers/<driver>.txt`.
    pub fn encode(&self, driver: u64) -> String {
        let mut out = first_line("driver", driver) + "\n";
        out.push_str(&format!("library: {}\n", one_line(&self.library)));
        out.push_str(&format!("build-id: {}\n", id_or_none(&self.build_id)));
        for (name, id) in &self.compilers {
            out.push_str(&format!(
                "compiler: {} {}\n",
                one_line(name).replace(' ', "_"),
                id_or_none(id)
            ));
        }
        out
    }

    /// The label in `text` if it is the one of the driver build `driver`.
    pub fn parse(text: &str, driver: u64) -> Option<DriverLabel> {
        let mut l = DriverLabel::default();
        for (field, value) in fields(text, "driver", driver)? {
            match field {
                "library" => l.library = value.to_string(),
                "build-id" => l.build_id = parse_id(value),
                "compiler" => {
                    let (name, id) = value.split_once(' ').unwrap_or((value, "none"));
                    l.compilers.push((name.to_string(), parse_id(id)));
                }
                _ => {}
            }
        }
        Some(l)
    }

    /// The driver build in one line: `library (build-id ID)`, or the library alone when it
    /// has no build-id.
    pub fn describe(&self) -> String {
        match &self.build_id {
            Some(id) => format!("{} (build-id {id})", self.library),
            None => self.library.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_round_trip_and_name_their_id() {
        let d = DeviceLabel {
            name: "cpu-haswell-AMD EPYC 7B13".into(),
            kind: "CPU".into(),
            platform: "Portable Computing Language".into(),
            platform_version: "OpenCL 3.0 PoCL 3.1+debian  Linux".into(),
            device_version: "OpenCL 1.2 PoCL HSTR: cpu-x86_64".into(),
            driver_version: "3.1".into(),
        };
        let text = d.encode(0xab);
        assert!(text.starts_with("clshim device 00000000000000ab\nname: cpu-haswell"));
        assert_eq!(DeviceLabel::parse(&text, 0xab), Some(d.clone()));
        assert_eq!(DeviceLabel::parse(&text, 0xac), None);
        assert_eq!(DriverLabel::parse(&text, 0xab), None);
        assert_eq!(
            d.describe(),
            "cpu-haswell-AMD EPYC 7B13 (Portable Computing Language; driver 3.1)"
        );
        let v = DriverLabel {
            library: "/usr/lib/x86_64-linux-gnu/libpocl.so.2.11.0".into(),
            build_id: Some("0a1b".into()),
            compilers: vec![
                ("libLLVM-15.so.1".into(), Some("ffee".into())),
                ("libclang-cpp.so.15".into(), None),
            ],
        };
        let text = v.encode(7);
        assert_eq!(DriverLabel::parse(&text, 7), Some(v.clone()));
        assert_eq!(
            v.describe(),
            "/usr/lib/x86_64-linux-gnu/libpocl.so.2.11.0 (build-id 0a1b)"
        );
        assert_eq!(DriverLabel::parse("anything else", 7), None);
    }

    #[test]
    fn a_value_stays_one_bounded_line() {
        let d = DeviceLabel {
            name: format!("evil\nplatform: forged\r{}", "x".repeat(5000)),
            ..DeviceLabel::default()
        };
        let back = DeviceLabel::parse(&d.encode(1), 1).unwrap();
        assert!(back.name.starts_with("evil platform: forged"));
        assert_eq!(back.platform, "");
        assert!(back.name.chars().count() <= MAX_VALUE);
    }
}
