//! The model loaders: XGBoost JSON / forest ensembles, the dense-network (MLP) format
//! and the sidecar, all from the same bytes.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = gearbox_policy::TreeEnsemble::from_json_slice(data);
    let _ = gearbox_policy::Mlp::from_json_slice(data);
    let _ = serde_json::from_slice::<gearbox_policy::ModelMeta>(data);
});
