module @jit_body attributes {mhlo.num_partitions = 16 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["data"=4, "tensor"=4]> {stablehlo.mesh = {axes = [{name = "data", size = 4 : i64}, {name = "tensor", size = 4 : i64}]}}
  func.func public @main(%arg0: tensor<8x32xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"data"}, {"tensor"}]>}) -> (tensor<8x8xf32> {jax.result_info = "result[0]"}, tensor<8x32xf32> {jax.result_info = "result[1]"}) {
    %0:2 = sdy.manual_computation(%arg0) in_shardings=[<@mesh, [{"data"}, {"tensor"}]>] out_shardings=[<@mesh, [{"data"}, {}]>, <@mesh, [{"data"}, {"tensor"}]>] manual_axes={"data", "tensor"} (%arg1: tensor<2x8xf32>) {
      %1 = "stablehlo.all_reduce"(%arg1) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11], [12, 13, 14, 15]]> : tensor<4x4xi64>, use_global_device_ids}> ({
      ^bb0(%arg2: tensor<f32>, %arg3: tensor<f32>):
        %4 = stablehlo.add %arg2, %arg3 : tensor<f32>
        stablehlo.return %4 : tensor<f32>
      }) : (tensor<2x8xf32>) -> tensor<2x8xf32>
      %cst = stablehlo.constant dense<2.000000e+00> : tensor<f32>
      %2 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<2x8xf32>
      %3 = stablehlo.multiply %2, %arg1 : tensor<2x8xf32>
      sdy.return %1, %3 : tensor<2x8xf32>, tensor<2x8xf32>
    } : (tensor<8x32xf32>) -> (tensor<8x8xf32>, tensor<8x32xf32>)
    return %0#0, %0#1 : tensor<8x8xf32>, tensor<8x32xf32>
  }
}
