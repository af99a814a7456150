module @jit__lambda attributes {mhlo.num_partitions = 16 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["node"=4, "gpu"=4]> {stablehlo.mesh = {axes = [{name = "node", size = 4 : i64}, {name = "gpu", size = 4 : i64}]}}
  func.func public @main(%arg0: tensor<128xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"node", "gpu"}]>}) -> (tensor<32xf32> {jax.result_info = "result"}) {
    %0 = sdy.manual_computation(%arg0) in_shardings=[<@mesh, [{"node", "gpu"}]>] out_shardings=[<@mesh, [{"node"}]>] manual_axes={"node", "gpu"} (%arg1: tensor<8xf32>) {
      %1 = stablehlo.broadcast_in_dim %arg1, dims = [1] : (tensor<8xf32>) -> tensor<1x8xf32>
      %2 = "stablehlo.all_gather"(%1) <{all_gather_dim = 0 : i64, channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11], [12, 13, 14, 15]]> : tensor<4x4xi64>, use_global_device_ids}> : (tensor<1x8xf32>) -> tensor<4x8xf32>
      %cst = stablehlo.constant dense<0.000000e+00> : tensor<f32>
      %3 = stablehlo.reduce(%2 init: %cst) applies stablehlo.add across dimensions = [0] : (tensor<4x8xf32>, tensor<f32>) -> tensor<8xf32>
      sdy.return %3 : tensor<8xf32>
    } : (tensor<128xf32>) -> tensor<32xf32>
    return %0 : tensor<32xf32>
  }
}
