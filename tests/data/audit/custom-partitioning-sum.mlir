module @jit__unnamed_function attributes {mhlo.num_partitions = 16 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["data"=4, "tensor"=4]> {stablehlo.mesh = {axes = [{name = "data", size = 4 : i64}, {name = "tensor", size = 4 : i64}]}}
  func.func public @main(%arg0: tensor<32x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"data"}, {}]>}) -> (tensor<8xf32> {jax.result_info = "result"}) {
    %0 = stablehlo.custom_call @CustomSPMDPartitioning(%arg0) {api_version = 2 : i32, backend_config = "139978960882064", sdy.sharding_rule = #sdy.op_sharding_rule<([i, j])->([j]) {i=32, j=8} reduction={i}, custom>} : (tensor<32x8xf32>) -> tensor<8xf32>
    return %0 : tensor<8xf32>
  }
}
