module @jit_step attributes {mhlo.num_partitions = 16 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["node"=4, "gpu"=4]>
  func.func public @main(%arg0: tensor<256xf32>) -> (tensor<256xf32> {jax.result_info = "result"}) {
    %0 = sdy.manual_computation(%arg0) in_shardings=[<@mesh, [{"node", "gpu"}]>] out_shardings=[<@mesh, [{"node", "gpu"}]>] manual_axes={"node", "gpu"} (%arg1: tensor<16xf32>) {
      %1 = sdy.named_computation<"layer">(%arg1) (%arg2: tensor<16xf32>) {
        %3 = "stablehlo.all_reduce"(%arg2) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11], [12, 13, 14, 15]]> : tensor<4x4xi64>, use_global_device_ids}> ({
        ^bb0(%a: tensor<f32>, %b: tensor<f32>):
          %s = stablehlo.add %a, %b : tensor<f32>
          stablehlo.return %s : tensor<f32>
        }) : (tensor<16xf32>) -> tensor<16xf32>
        sdy.return %3 : tensor<16xf32>
      } : (tensor<16xf32>) -> tensor<16xf32>
      %2 = "stablehlo.all_reduce"(%1) <{channel_handle = #stablehlo.channel_handle<handle = 2, type = 1>, replica_groups = dense<[[0, 4, 8, 12], [1, 5, 9, 13], [2, 6, 10, 14], [3, 7, 11, 15]]> : tensor<4x4xi64>, use_global_device_ids}> ({
      ^bb0(%a: tensor<f32>, %b: tensor<f32>):
        %s = stablehlo.add %a, %b : tensor<f32>
        stablehlo.return %s : tensor<f32>
      }) : (tensor<16xf32>) -> tensor<16xf32>
      sdy.return %2 : tensor<16xf32>
    } : (tensor<256xf32>) -> tensor<256xf32>
    return %0 : tensor<256xf32>
  }
}
