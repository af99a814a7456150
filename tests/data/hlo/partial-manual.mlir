module @jit_partial_manual attributes {mhlo.num_partitions = 16 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["data"=4, "tensor"=4]> {stablehlo.mesh = {axes = [{name = "data", size = 4 : i64}, {name = "tensor", size = 4 : i64}]}}
  func.func public @main(%arg0: tensor<1024xf32>) -> (tensor<1024xf32> {jax.result_info = "result"}) {
    %0 = sdy.manual_computation(%arg0) in_shardings=[<@mesh, [{"tensor", ?}]>] out_shardings=[<@mesh, [{"tensor", ?}]>] manual_axes={"tensor"} (%arg1: tensor<256xf32>) {
      %1 = "stablehlo.reduce_scatter"(%arg1) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11], [12, 13, 14, 15]]> : tensor<4x4xi64>, scatter_dimension = 0 : i64, use_global_device_ids}> ({
      ^bb0(%arg2: tensor<f32>, %arg3: tensor<f32>):
        %3 = stablehlo.add %arg2, %arg3 : tensor<f32>
        %4 = sdy.sharding_constraint %3 <@mesh, []> : tensor<f32>
        stablehlo.return %4 : tensor<f32>
      }) : (tensor<256xf32>) -> tensor<64xf32>
      %2 = "stablehlo.all_gather"(%1) <{all_gather_dim = 0 : i64, channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11], [12, 13, 14, 15]]> : tensor<4x4xi64>, use_global_device_ids}> : (tensor<64xf32>) -> tensor<256xf32>
      sdy.return %2 : tensor<256xf32>
    } : (tensor<1024xf32>) -> tensor<1024xf32>
    return %0 : tensor<1024xf32>
  }
}
