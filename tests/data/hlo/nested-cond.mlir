module @jit_nested_cond attributes {mhlo.num_partitions = 16 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["node"=4, "gpu"=4]> {stablehlo.mesh = {axes = [{name = "node", size = 4 : i64}, {name = "gpu", size = 4 : i64}]}}
  func.func public @main(%arg0: tensor<256xf32>) -> (tensor<256xf32> {jax.result_info = "result"}) {
    %0 = sdy.manual_computation(%arg0) in_shardings=[<@mesh, [{"node", "gpu"}]>] out_shardings=[<@mesh, [{"node", "gpu"}]>] manual_axes={"node", "gpu"} (%arg1: tensor<16xf32>) {
      %1 = "stablehlo.all_reduce"(%arg1) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]]> : tensor<1x16xi64>, use_global_device_ids}> ({
      ^bb0(%arg2: tensor<f32>, %arg3: tensor<f32>):
        %8 = stablehlo.add %arg2, %arg3 : tensor<f32>
        stablehlo.return %8 : tensor<f32>
      }) : (tensor<16xf32>) -> tensor<16xf32>
      %2 = stablehlo.slice %arg1 [0:1] : (tensor<16xf32>) -> tensor<1xf32>
      %3 = stablehlo.reshape %2 : (tensor<1xf32>) -> tensor<f32>
      %cst = stablehlo.constant dense<-1.000000e+30> : tensor<f32>
      %4 = stablehlo.compare GT, %3, %cst, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
      %5 = stablehlo.convert %4 : (tensor<i1>) -> tensor<i32>
      %6 = "stablehlo.case"(%5) ({
        stablehlo.return %arg1 : tensor<16xf32>
      }, {
        %8 = stablehlo.convert %4 : (tensor<i1>) -> tensor<i32>
        %9 = "stablehlo.case"(%8) ({
          %cst_0 = stablehlo.constant dense<2.000000e+00> : tensor<f32>
          %10 = stablehlo.broadcast_in_dim %cst_0, dims = [] : (tensor<f32>) -> tensor<16xf32>
          %11 = stablehlo.multiply %10, %1 : tensor<16xf32>
          stablehlo.return %11 : tensor<16xf32>
        }, {
          stablehlo.return %1 : tensor<16xf32>
        }) : (tensor<i32>) -> tensor<16xf32>
        stablehlo.return %9 : tensor<16xf32>
      }) : (tensor<i32>) -> tensor<16xf32>
      %7 = "stablehlo.all_reduce"(%6) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]]> : tensor<1x16xi64>, use_global_device_ids}> ({
      ^bb0(%arg2: tensor<f32>, %arg3: tensor<f32>):
        %8 = stablehlo.add %arg2, %arg3 : tensor<f32>
        stablehlo.return %8 : tensor<f32>
      }) : (tensor<16xf32>) -> tensor<16xf32>
      sdy.return %7 : tensor<16xf32>
    } : (tensor<256xf32>) -> tensor<256xf32>
    return %0 : tensor<256xf32>
  }
}
