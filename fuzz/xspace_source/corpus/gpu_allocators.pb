
“	/host:CPUæ
tf_Compute€”ğ¼ Å×ö"
è€•õ*"€‰z"

 €€À€€à" € "  " €€@"*	GPU_0_bfc"*model/dense/MatMul"
*output"*[32,32]" "	 €€Àÿ¿" €€@"/À·"
 € " €" €"*gpu_host_bfc"€’ô"

 €€€€à" € " € @"*	GPU_0_bfc"-*)gradient_tape/model/dense/MatMul/MatMul_1"
*output"*[32,32]" "XÀ–±"

 €€€€€â" €" €"*	GPU_1_bfc"*model/dense/Relu"*temp"*[]"1€›î"

 €€€€€à" €@" €à?"*	GPU_0_bfc"LÀŸ«"*model/dense/kernel"

 €€À€€à" € "
*weight"*[32, 32]"1€¤è"

 €€€€à" € " €À?"*	GPU_0_bfc"40,EagerLocalExecute: __inference_train_step_42"vramscope.variable"MemoryDeallocation"MemoryAllocation*	tf_op*allocator_name*bytes_allocated*requested_bytes*allocation_bytes*

addr*peak_bytes_in_use*bytes_available*	bytes*role*path*	data_type*	shape*region_type