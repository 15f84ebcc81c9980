//! What clshim knows about each device: its name, type, platform, vendor and driver
//! version, whether the configured `DeviceFilter` selects it, and the fingerprint that ties
//! a clshim binary to it. Looked up once per device through the dispatch route and cached,
//! since binary queries ask about the same few devices over and over.

use crate::cl::*;
use crate::config::DeviceFilter;
use crate::dispatch::Route;
use crate::hash::Fnv1a;
use crate::lock::{ForkOrder, Lock};
use crate::query::info_bytes;
use crate::schema::{self, POCL_PLATFORM};
use std::collections::HashMap;
use std::sync::Arc;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceFacts {
    pub name: String,
    pub device_type: cl_device_type,
    pub vendor: String,
    pub driver: String,
    pub version: String,
    pub platform: String,
    pub platform_version: String,
    /// Not part of the fingerprint: pocl takes it from the host and its variables.
    pub compute_units: Option<u32>,
}

impl DeviceFacts {
    pub fn selected_by(&self, filter: DeviceFilter) -> bool {
        let pocl = self.platform == POCL_PLATFORM;
        match filter {
            DeviceFilter::PoclCpu => pocl && self.device_type & CL_DEVICE_TYPE_CPU != 0,
            DeviceFilter::Pocl => pocl,
            DeviceFilter::All => true,
        }
    }

    /// Identifies the compiler a clshim binary was made for: a binary made for another
    /// platform, device or driver version is rejected rather than rebuilt somewhere else.
    pub fn fingerprint(&self) -> u64 {
        let mut h = Fnv1a::default();
        for part in [
            &self.platform,
            &self.platform_version,
            &self.name,
            &self.driver,
            &self.version,
        ] {
            h.update(part.as_bytes()).update(&[0]);
        }
        h.finish()
    }

    /// The device as records describe it.
    pub fn describe(&self, filter: DeviceFilter) -> schema::Device {
        schema::Device {
            name: self.name.clone(),
            kind: device_type_name(self.device_type),
            platform: self.platform.clone(),
            vendor: self.vendor.clone(),
            driver: self.driver.clone(),
            matched: self.selected_by(filter),
            compute_units: self.compute_units,
        }
    }
}

fn text(bytes: Option<Vec<u8>>) -> String {
    let bytes = bytes.unwrap_or_default();
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).trim().to_string()
}

/// Asks the implementation about `device`. None when the device cannot be queried at all.
///
/// # Safety
/// `device` must be a live device of an implementation reachable through `route`.
pub unsafe fn query(route: Route, device: cl_device_id) -> Option<DeviceFacts> {
    // SAFETY: a live device reachable through `route` (this function's contract).
    let dev_info = unsafe { route.get_device_info(device) }?;
    // SAFETY: the device's own clGetDeviceInfo.
    let get = |p| unsafe { info_bytes(dev_info, device, p) };
    let type_bytes = get(CL_DEVICE_TYPE)?;
    let device_type = cl_device_type::from_ne_bytes(type_bytes.get(..8)?.try_into().ok()?);
    let platform_bytes = get(CL_DEVICE_PLATFORM)?;
    let platform = usize::from_ne_bytes(
        platform_bytes
            .get(..std::mem::size_of::<usize>())?
            .try_into()
            .ok()?,
    ) as cl_platform_id;
    let (platform_name, platform_version) =
        // SAFETY: the platform the implementation gave for its live device.
        match unsafe { route.get_platform_info(platform) } {
            Some(pinfo) => (
                // SAFETY: the platform's own clGetPlatformInfo.
                text(unsafe { info_bytes(pinfo, platform, CL_PLATFORM_NAME) }),
                // SAFETY: as above.
                text(unsafe { info_bytes(pinfo, platform, CL_PLATFORM_VERSION) }),
            ),
            None => (String::new(), String::new()),
        };
    Some(DeviceFacts {
        name: text(get(CL_DEVICE_NAME)),
        device_type,
        vendor: text(get(CL_DEVICE_VENDOR)),
        driver: text(get(CL_DRIVER_VERSION)),
        version: text(get(CL_DEVICE_VERSION)),
        platform: platform_name,
        platform_version,
        compute_units: get(CL_DEVICE_MAX_COMPUTE_UNITS)
            .and_then(|b| Some(u32::from_ne_bytes(b.get(..4)?.try_into().ok()?))),
    })
}

/// Device facts by device handle, filled on first use.
pub struct DeviceCache {
    /// Held across fork (registered with the fork handlers).
    map: &'static Lock<HashMap<usize, Arc<DeviceFacts>>>,
}

impl Default for DeviceCache {
    fn default() -> DeviceCache {
        DeviceCache {
            map: Lock::new_fork_held(ForkOrder::Devices, HashMap::new()),
        }
    }
}

impl DeviceCache {
    /// The facts of `device`, querying the implementation the first time. The lock is not
    /// held while querying, so a slow driver never blocks other threads' lookups.
    ///
    /// # Safety
    /// As for [`query`].
    pub unsafe fn get(&self, route: Route, device: cl_device_id) -> Option<Arc<DeviceFacts>> {
        if let Some(f) = self.map.lock().get(&(device as usize)) {
            return Some(f.clone());
        }
        // SAFETY: as for `query` (this function's contract).
        let facts = Arc::new(unsafe { query(route, device) }?);
        Some(
            self.map
                .lock()
                .entry(device as usize)
                .or_insert(facts)
                .clone(),
        )
    }
}

/// The devices of a record, as its `devices` field: each one's description, or None
/// (null) where the device could not be queried.
pub fn describe_all(
    filter: DeviceFilter,
    facts: &[Option<Arc<DeviceFacts>>],
) -> Vec<Option<schema::Device>> {
    facts
        .iter()
        .map(|f| f.as_ref().map(|f| f.describe(filter)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(platform: &str, t: cl_device_type) -> DeviceFacts {
        DeviceFacts {
            name: "dev".into(),
            device_type: t,
            vendor: "v".into(),
            driver: "3.1".into(),
            version: "OpenCL 3.0".into(),
            platform: platform.into(),
            platform_version: "OpenCL 3.0 pocl 3.1".into(),
            compute_units: Some(2),
        }
    }

    #[test]
    fn filters_select_the_intended_devices() {
        let pocl_cpu = facts(POCL_PLATFORM, CL_DEVICE_TYPE_CPU);
        let pocl_gpu = facts(POCL_PLATFORM, CL_DEVICE_TYPE_GPU);
        let nvidia = facts("NVIDIA CUDA", CL_DEVICE_TYPE_GPU);
        assert!(pocl_cpu.selected_by(DeviceFilter::PoclCpu));
        assert!(!pocl_gpu.selected_by(DeviceFilter::PoclCpu));
        assert!(pocl_gpu.selected_by(DeviceFilter::Pocl));
        assert!(!nvidia.selected_by(DeviceFilter::Pocl));
        assert!(nvidia.selected_by(DeviceFilter::All));
    }

    #[test]
    fn fingerprint_changes_with_the_driver() {
        let a = facts(POCL_PLATFORM, CL_DEVICE_TYPE_CPU);
        let b = DeviceFacts {
            driver: "3.2".into(),
            ..a.clone()
        };
        assert_eq!(a.fingerprint(), a.clone().fingerprint());
        assert_ne!(a.fingerprint(), b.fingerprint());
    }
}
