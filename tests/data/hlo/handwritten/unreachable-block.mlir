module @m attributes {mhlo.num_partitions = 16 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["node"=4, "gpu"=4]>
  func.func public @main(%arg0: tensor<1024xf32>) -> (tensor<1024xf32>) {
    %m = sdy.manual_computation(%arg0) in_shardings=[<@mesh, [{"node", "gpu"}]>] out_shardings=[<@mesh, [{"node", "gpu"}]>] manual_axes={"node", "gpu"} (%xm: tensor<64xf32>) {
      %rm = "stablehlo.all_reduce"(%xm) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 4, 8, 12], [1, 5, 9, 13], [2, 6, 10, 14], [3, 7, 11, 15]]> : tensor<4x4xi64>, use_global_device_ids}> ({
      ^bb0(%a1: tensor<f32>, %b1: tensor<f32>):
        %s1 = stablehlo.add %a1, %b1 : tensor<f32>
        stablehlo.return %s1 : tensor<f32>
      }) : (tensor<64xf32>) -> tensor<64xf32>
      sdy.return %rm : tensor<64xf32>
    } : (tensor<1024xf32>) -> tensor<1024xf32>
    return %m : tensor<1024xf32>
  ^bb1:
    %k = sdy.manual_computation(%m) in_shardings=[<@mesh, [{"node", "gpu"}]>] out_shardings=[<@mesh, [{"node", "gpu"}]>] manual_axes={"node", "gpu"} (%xk: tensor<64xf32>) {
      %rk = "stablehlo.all_reduce"(%xk) <{channel_handle = #stablehlo.channel_handle<handle = 2, type = 1>, replica_groups = dense<[[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11], [12, 13, 14, 15]]> : tensor<4x4xi64>, use_global_device_ids}> ({
      ^bb0(%a2: tensor<f32>, %b2: tensor<f32>):
        %s2 = stablehlo.add %a2, %b2 : tensor<f32>
        stablehlo.return %s2 : tensor<f32>
      }) : (tensor<64xf32>) -> tensor<64xf32>
      sdy.return %rk : tensor<64xf32>
    } : (tensor<1024xf32>) -> tensor<1024xf32>
    return %k : tensor<1024xf32>
  }
}
