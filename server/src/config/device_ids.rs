//! `[kubernetes] device_resources`: how a vendor device plugin's device ids name the
//! devices they stand for, so npud can book a pod on the NPUs or GPUs the kubelet gave it.
//!
//! Each resource has id templates: literal text with placeholders.
//! - `{physical_id}`: a decimal Ascend physical device id (npud's `physical_id`).
//! - `{uuid}`: a CUDA UUID as `GPU-` (or a MIG device's, `MIG-`) and 8-4-4-4-12 hex digits
//!   (npud's `uuid`).
//! - `{n}`: a decimal number that names no device (a replica, an instance).
//! - `{*}`: any non-empty text that names no device.
//!
//! An id that matches a template without `{physical_id}` or `{uuid}` is the vendor's, but
//! names no device npud can book (a MIG instance, a virtual NPU): its allocation is booked
//! per acquisition instead, as is one whose ids match no template at all.

use serde::Deserialize;

/// The vendors' defaults, each from its plugin's source.
pub fn default_resources() -> Vec<DeviceResource> {
    let entry = |name: &str, ids: &[&str]| DeviceResource {
        name: name.into(),
        ids: ids.iter().map(|t| IdTemplate::parse(t).unwrap_or_else(|_| IdTemplate(Vec::new()))).collect(),
    };
    vec![
        // Ascend's device plugin names a whole NPU `<type>-<physical id>` and a virtual one
        // `<type>-<cores>c-<vdev>-<physical id>` under its own resource (`GetDeviceID` in
        // Ascend/ascend-device-plugin pkg/common/device.go). Under Volcano the plugin mounts
        // the NPUs of the pod's `huawei.com/AscendReal` annotation, which can differ from the
        // kubelet's pick: remove these entries there (docs/kubernetes.md).
        entry("huawei.com/Ascend910", &["Ascend910-{physical_id}"]),
        entry("huawei.com/Ascend310P", &["Ascend310P-{physical_id}"]),
        entry("huawei.com/Ascend310", &["Ascend310-{physical_id}"]),
        // NVIDIA's plugin under `deviceIDStrategy: uuid` (its default) names a GPU by its
        // UUID, a MIG instance `MIG-<uuid>` (not its GPU's), and a time-sliced replica
        // `<id>::<replica>` (`AnnotatedID` in NVIDIA/k8s-device-plugin internal/rm/devices.go).
        // Under `deviceIDStrategy: index` the ids are numbers and match nothing here.
        entry("nvidia.com/gpu", &["{uuid}", "{uuid}::{n}"]),
    ]
}

/// One vendor resource: its name and the templates of its ids.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceResource {
    pub name: String,
    pub ids: Vec<IdTemplate>,
}

/// `[[kubernetes.device_resources]]` as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileDeviceResource {
    pub name: String,
    pub ids: Vec<String>,
}

impl FileDeviceResource {
    pub fn resolve(&self) -> Result<DeviceResource, String> {
        check_resource_name(&self.name)
            .map_err(|why| format!("kubernetes.device_resources: {:?} is not a resource name: {why}", self.name))?;
        if self.ids.is_empty() || self.ids.len() > 16 {
            return Err(format!("kubernetes.device_resources {:?}: give 1..=16 id templates", self.name));
        }
        let ids = self
            .ids
            .iter()
            .map(|t| IdTemplate::parse(t).map_err(|why| format!("kubernetes.device_resources {:?}: {why}", self.name)))
            .collect::<Result<_, _>>()?;
        Ok(DeviceResource { name: self.name.clone(), ids })
    }
}

/// The kubelet's rule for extended resource names (`IsExtendedResourceName`): a domain
/// prefix, a `/`, and a name of at most 63 characters; not in `kubernetes.io/`, not
/// starting with `requests.`.
pub fn check_resource_name(name: &str) -> Result<(), &'static str> {
    let (prefix, rest) = name.split_once('/').ok_or("it needs a domain prefix and a '/'")?;
    if name.contains("kubernetes.io/") || name.starts_with("requests.") {
        return Err("the kubernetes.io/ and requests. prefixes are reserved");
    }
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    if prefix.len() > 253 || !prefix.split('.').all(label_ok) {
        return Err("the prefix must be a lowercase DNS subdomain");
    }
    let inner = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.');
    let ends = |b: Option<&u8>| b.is_some_and(u8::is_ascii_alphanumeric);
    if rest.is_empty()
        || rest.len() > 63
        || !rest.bytes().all(inner)
        || !ends(rest.as_bytes().first())
        || !ends(rest.as_bytes().last())
    {
        return Err("the name after '/' must be 1..=63 of [A-Za-z0-9-_.], starting and ending alphanumeric");
    }
    Ok(())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    PhysicalId,
    Uuid,
    Number,
    Any,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Text(String),
    Slot(Slot),
}

/// One id template (see the module's documentation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdTemplate(Vec<Part>);

/// What a device id names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Named {
    PhysicalId(u32),
    Uuid(String),
    /// The vendor's device, but not one npud can tell (a MIG instance, a virtual NPU).
    Unplaceable,
}

impl IdTemplate {
    pub fn parse(text: &str) -> Result<IdTemplate, String> {
        if text.is_empty() || text.len() > 128 {
            return Err(format!("the id template {text:?} must be 1..=128 characters"));
        }
        let mut parts = Vec::new();
        let mut rest = text;
        while let Some(open) = rest.find('{') {
            if open > 0 {
                parts.push(Part::Text(rest[..open].to_string()));
            }
            let close = rest[open..].find('}').ok_or_else(|| format!("the id template {text:?} has an open '{{'"))?;
            let slot = match &rest[open + 1..open + close] {
                "physical_id" => Slot::PhysicalId,
                "uuid" => Slot::Uuid,
                "n" => Slot::Number,
                "*" => Slot::Any,
                other => {
                    return Err(format!(
                        "the id template {text:?} names {{{other}}}; use {{physical_id}}, {{uuid}}, {{n}} or {{*}}"
                    ));
                }
            };
            if matches!(parts.last(), Some(Part::Slot(_))) {
                return Err(format!("the id template {text:?} puts two placeholders side by side"));
            }
            parts.push(Part::Slot(slot));
            rest = &rest[open + close + 1..];
        }
        if rest.contains('}') {
            return Err(format!("the id template {text:?} has a stray '}}'"));
        }
        if !rest.is_empty() {
            parts.push(Part::Text(rest.to_string()));
        }
        let naming = parts.iter().filter(|p| matches!(p, Part::Slot(Slot::PhysicalId | Slot::Uuid))).count();
        if naming > 1 {
            return Err(format!("the id template {text:?} names a device twice"));
        }
        Ok(IdTemplate(parts))
    }

    /// What `id` names, if it has this template's form.
    pub fn matches(&self, id: &str) -> Option<Named> {
        let mut named = Named::Unplaceable;
        matches_from(&self.0, id, &mut named).then_some(named)
    }
}

/// Whether `parts` match all of `id`; a placeholder takes the shortest text that lets the
/// rest match (ids are short, so trying each split is cheap).
fn matches_from(parts: &[Part], id: &str, named: &mut Named) -> bool {
    let Some((first, rest)) = parts.split_first() else { return id.is_empty() };
    match first {
        Part::Text(t) => id.strip_prefix(t.as_str()).is_some_and(|after| matches_from(rest, after, named)),
        Part::Slot(slot) => {
            for end in 1..=id.len() {
                if !id.is_char_boundary(end) {
                    continue;
                }
                let (value, after) = id.split_at(end);
                let Some(this) = slot_value(*slot, value) else { continue };
                if matches_from(rest, after, named) {
                    if !matches!(this, Named::Unplaceable) {
                        *named = this;
                    }
                    return true;
                }
            }
            false
        }
    }
}

fn slot_value(slot: Slot, value: &str) -> Option<Named> {
    let decimal = |v: &str| !v.is_empty() && v.len() <= 9 && v.bytes().all(|b| b.is_ascii_digit());
    match slot {
        Slot::PhysicalId => decimal(value).then(|| value.parse().ok().map(Named::PhysicalId)).flatten(),
        // A MIG device's id is its own UUID (`MIG-…`), which names it as npud's device where
        // NVML showed npud the host's MIG devices.
        Slot::Uuid => npud_proto::identity::parse_gpu_uuid(value).map(|_| Named::Uuid(value.to_string())),
        Slot::Number => decimal(value).then_some(Named::Unplaceable),
        Slot::Any => Some(Named::Unplaceable),
    }
}

/// What `id` of `resource` names under `resources`: None when no entry has the resource,
/// or none of its templates fits the id.
pub fn name_device(resources: &[DeviceResource], resource: &str, id: &str) -> Option<Named> {
    resources.iter().filter(|r| r.name == resource).flat_map(|r| &r.ids).find_map(|t| t.matches(id))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_names_follow_the_kubelet() {
        for ok in ["npud.io/streams", "example.com/foo", "huawei.com/Ascend910", "a.b-c.d/x_y.z"] {
            assert!(check_resource_name(ok).is_ok(), "{ok}");
        }
        for bad in [
            "streams",
            "kubernetes.io/streams",
            "requests.npud.io/s",
            "NPUD.io/s",
            "npud.io/",
            "npud.io/-s",
            "npud.io/s!",
        ] {
            assert!(check_resource_name(bad).is_err(), "{bad}");
        }
    }

    const UUID: &str = "GPU-00112233-4455-6677-8899-aabbccddeeff";

    #[test]
    fn the_vendors_ids_name_their_devices() {
        let d = default_resources();
        let name = |r: &str, id: &str| name_device(&d, r, id);
        assert_eq!(name("huawei.com/Ascend910", "Ascend910-3"), Some(Named::PhysicalId(3)));
        assert_eq!(name("huawei.com/Ascend910", "Ascend910-2c-100-0"), None, "a virtual NPU is not a whole one");
        assert_eq!(name("huawei.com/Ascend910", "Ascend910-"), None);
        assert_eq!(name("huawei.com/Ascend310P", "Ascend310P-12"), Some(Named::PhysicalId(12)));
        assert_eq!(name("nvidia.com/gpu", UUID), Some(Named::Uuid(UUID.into())));
        assert_eq!(name("nvidia.com/gpu", &UUID.replace("GPU-", "gpu-")), None, "GPU- is literal");
        assert_eq!(name("nvidia.com/gpu", &format!("{UUID}::3")), Some(Named::Uuid(UUID.into())), "a replica");
        let mig = "MIG-7f3c2c8e-2d8a-5a87-9a3e-1f6c7b2d9e01";
        assert_eq!(name("nvidia.com/gpu", mig), Some(Named::Uuid(mig.into())), "a MIG device, by its own UUID");
        assert_eq!(name("nvidia.com/gpu", "0"), None, "the index strategy's ids name nothing");
        assert_eq!(name("example.com/npu", "Ascend910-3"), None, "another resource");
    }

    #[test]
    fn templates_are_checked_when_read() {
        for bad in ["", "x{", "x}", "{nope}", "{n}{*}", "{uuid}-{physical_id}"] {
            assert!(IdTemplate::parse(bad).is_err(), "{bad:?}");
        }
        let t = IdTemplate::parse("npu{physical_id}.{*}").unwrap();
        assert_eq!(t.matches("npu7.core-3"), Some(Named::PhysicalId(7)));
        assert_eq!(t.matches("npu7."), None);
        let file = FileDeviceResource { name: "Bad Name".into(), ids: vec!["{uuid}".into()] };
        assert!(file.resolve().unwrap_err().contains("not a resource name"));
    }
}
